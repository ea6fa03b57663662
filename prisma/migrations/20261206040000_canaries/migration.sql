-- Canary prompts: a prompt with a known answer per model, which the dispatchers send to network devices
-- that serve the model. A new network device is on probation (no network tasks) until it answers one;
-- a device that answers one wrong is quarantined. Every device registered before stays trusted.
-- The new trust value is the default from the next migration: Postgres cannot use an enum value in
-- the transaction that adds it.
-- AlterEnum
ALTER TYPE "device_trust" ADD VALUE 'probation';

-- AlterTable
ALTER TABLE "devices" ADD COLUMN     "canaries_failed" INTEGER NOT NULL DEFAULT 0,
ADD COLUMN     "canaries_passed" INTEGER NOT NULL DEFAULT 0,
ADD COLUMN     "last_canary_at" TIMESTAMPTZ(3);

-- CreateTable
CREATE TABLE "canaries" (
    "id" UUID NOT NULL,
    "model_id" TEXT NOT NULL,
    "messages" JSONB NOT NULL,
    "max_tokens" INTEGER NOT NULL,
    "expect" JSONB NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "canaries_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "canaries_model_id_idx" ON "canaries"("model_id");

-- AddForeignKey
ALTER TABLE "canaries" ADD CONSTRAINT "canaries_model_id_fkey" FOREIGN KEY ("model_id") REFERENCES "models"("id") ON DELETE CASCADE ON UPDATE CASCADE;
