-- Each dispatcher reads the devices registered since its last look (libs/common/src/limits/known-credentials.ts),
-- when a handshake brings a token it does not know: on this index, that read costs the same whatever the number
-- of devices.
-- CreateIndex
CREATE INDEX "devices_created_at_idx" ON "devices"("created_at");
