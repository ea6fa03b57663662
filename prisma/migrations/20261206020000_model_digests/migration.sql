-- A model's pinned digests: a device whose runtime reports another digest for it (or none) is refused it
-- (libs/common/src/protocol/messages.ts, REFUSAL_REASONS). Empty: no pin, any device may serve it.
-- AlterTable
ALTER TABLE "models" ADD COLUMN     "allowed_digests" TEXT[] DEFAULT ARRAY[]::TEXT[];

-- The digest a task was served with, as its device announced it (null: it announced none).
-- AlterTable
ALTER TABLE "tasks" ADD COLUMN     "model_digest" TEXT;
