-- Which devices may serve what (an admin's list per device), whether an org's prompts may go to the shared
-- network, and its weight in fair sharing of a queue.
-- AlterTable
ALTER TABLE "organizations" ADD COLUMN     "network" BOOLEAN NOT NULL DEFAULT true,
ADD COLUMN     "weight" INTEGER NOT NULL DEFAULT 1;

-- AlterTable
ALTER TABLE "devices" ADD COLUMN     "models_restricted" BOOLEAN NOT NULL DEFAULT false;

-- CreateTable
CREATE TABLE "device_models" (
    "device_id" UUID NOT NULL,
    "model_id" TEXT NOT NULL,

    CONSTRAINT "device_models_pkey" PRIMARY KEY ("device_id","model_id")
);

-- CreateIndex
CREATE INDEX "device_models_model_id_idx" ON "device_models"("model_id");

-- AddForeignKey
ALTER TABLE "device_models" ADD CONSTRAINT "device_models_device_id_fkey" FOREIGN KEY ("device_id") REFERENCES "devices"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "device_models" ADD CONSTRAINT "device_models_model_id_fkey" FOREIGN KEY ("model_id") REFERENCES "models"("id") ON DELETE CASCADE ON UPDATE CASCADE;

