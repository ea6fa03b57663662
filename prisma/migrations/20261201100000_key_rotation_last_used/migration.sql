-- AlterTable
ALTER TABLE "api_keys" ADD COLUMN     "last_used_at" TIMESTAMPTZ(3),
ADD COLUMN     "rotated_from_id" UUID;

-- CreateIndex
CREATE UNIQUE INDEX "api_keys_rotated_from_id_key" ON "api_keys"("rotated_from_id");

-- AddForeignKey
ALTER TABLE "api_keys" ADD CONSTRAINT "api_keys_rotated_from_id_fkey" FOREIGN KEY ("rotated_from_id") REFERENCES "api_keys"("id") ON DELETE SET NULL ON UPDATE CASCADE;

