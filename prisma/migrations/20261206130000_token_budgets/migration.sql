-- Monthly token budgets (issue 39): an organization's and a key's ceiling on the tokens their requests use in a
-- calendar month (UTC). Null is no ceiling. The spend itself is counted in Redis (docs/architecture.md, "Budgets").
-- AlterTable
ALTER TABLE "organizations" ADD COLUMN     "monthly_token_budget" BIGINT;

-- AlterTable
ALTER TABLE "api_keys" ADD COLUMN     "monthly_token_budget" BIGINT;

