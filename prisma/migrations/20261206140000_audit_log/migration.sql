-- The audit log (issue 39): one row per admin change made through the admin API, the dashboard or the CLI: when,
-- by whom (never a secret), what, and the values before and after. Written by libs/common/src/admin/audit.ts.
-- CreateEnum
CREATE TYPE "audit_via" AS ENUM ('api', 'dashboard', 'cli');

-- CreateTable
CREATE TABLE "audit_log" (
    "id" BIGSERIAL NOT NULL,
    "at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "actor" TEXT NOT NULL,
    "via" "audit_via" NOT NULL,
    "kind" TEXT NOT NULL,
    "target" TEXT NOT NULL,
    "before" JSONB,
    "after" JSONB,

    CONSTRAINT "audit_log_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "audit_log_at_idx" ON "audit_log"("at");

-- CreateIndex
CREATE INDEX "audit_log_kind_id_idx" ON "audit_log"("kind", "id");

