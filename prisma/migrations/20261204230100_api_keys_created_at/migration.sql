-- Each api instance reads the API keys created since its last look (libs/common/src/limits/known-credentials.ts):
-- on this index, that read costs the same whatever the number of keys.
-- CreateIndex
CREATE INDEX "api_keys_created_at_idx" ON "api_keys"("created_at");
