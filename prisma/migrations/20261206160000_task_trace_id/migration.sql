-- OpenTelemetry (issue 39): a task record keeps the trace id of the request that made it, when the api exported
-- traces; null otherwise (and for every task recorded before).
-- AlterTable
ALTER TABLE "tasks" ADD COLUMN     "trace_id" TEXT;

