-- An organization's compatibility: which rules its OpenAI routes follow where OpenAI and the Nodea specification
-- differ (docs/api.md, "Compatibility"): `nodea` includes the stop text in the output and counts one choice in
-- `usage.completion_tokens` with `n` > 1. Every organization, existing ones included, keeps OpenAI's (`openai`).
-- CreateEnum
CREATE TYPE "org_compat" AS ENUM ('openai', 'nodea');

-- AlterTable
ALTER TABLE "organizations" ADD COLUMN     "compat" "org_compat" NOT NULL DEFAULT 'openai';
