-- A network device's trust: a quarantined one gets no network tasks (the dispatchers refuse it its models,
-- reason `quarantined`). Every device registered before is trusted, as it was in effect.
-- CreateEnum
CREATE TYPE "device_trust" AS ENUM ('trusted', 'quarantined');

-- AlterTable
ALTER TABLE "devices" ADD COLUMN     "trust" "device_trust" NOT NULL DEFAULT 'trusted',
ADD COLUMN     "trust_changed_at" TIMESTAMPTZ(3),
ADD COLUMN     "trust_reason" TEXT;
