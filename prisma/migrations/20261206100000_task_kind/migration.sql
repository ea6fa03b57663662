-- A task's kind: what it asked for, `chat` (the chat routes) or `embedding` (the embeddings routes, issue 38), and
-- the same dimension in the usage rollups (`group_by=kind`). Its own enum, not `model_kind`: a task's kind is its
-- request's, fixed when it is queued; a model's is the catalog's and may change. Every task recorded before was a
-- chat request, so existing tasks, rollups and deltas are `chat`: no rebuild is needed. A model's tasks are of one
-- kind, so the rollups keep the number of rows they had.
-- CreateEnum
CREATE TYPE "task_kind" AS ENUM ('chat', 'embedding');

-- AlterTable
ALTER TABLE "tasks" ADD COLUMN     "kind" "task_kind" NOT NULL DEFAULT 'chat';

-- The rollups and deltas take `chat` for the rows they hold, then have no default: usage_delta_statements(),
-- usage_fold_deltas() and usage_rebuild() below, their only writers, always name the kind. Their primary keys
-- carry the values again (INCLUDE, as in the usage migration: Prisma's diff does not write it).
-- AlterTable
ALTER TABLE "usage_counts" DROP CONSTRAINT "usage_counts_pkey",
ADD COLUMN     "kind" "task_kind" NOT NULL DEFAULT 'chat',
ADD CONSTRAINT "usage_counts_pkey" PRIMARY KEY ("org_id", "period", "start", "model_id", "api_key_id", "mode", "kind", "status")
  INCLUDE ("requests", "prompt_tokens", "completion_tokens", "output_bytes");
ALTER TABLE "usage_counts" ALTER COLUMN "kind" DROP DEFAULT;

-- AlterTable
ALTER TABLE "usage_latency" DROP CONSTRAINT "usage_latency_pkey",
ADD COLUMN     "kind" "task_kind" NOT NULL DEFAULT 'chat',
ADD CONSTRAINT "usage_latency_pkey" PRIMARY KEY ("org_id", "period", "start", "model_id", "api_key_id", "mode", "kind", "metric", "bucket")
  INCLUDE ("tasks");
ALTER TABLE "usage_latency" ALTER COLUMN "kind" DROP DEFAULT;

-- AlterTable
ALTER TABLE "usage_count_deltas" ADD COLUMN     "kind" "task_kind" NOT NULL DEFAULT 'chat';
ALTER TABLE "usage_count_deltas" ALTER COLUMN "kind" DROP DEFAULT;

-- AlterTable
ALTER TABLE "usage_latency_deltas" ADD COLUMN     "kind" "task_kind" NOT NULL DEFAULT 'chat';
ALTER TABLE "usage_latency_deltas" ALTER COLUMN "kind" DROP DEFAULT;

-- The month rows of every organization, covered with the kind too (a report reads them by index only).
DROP INDEX "usage_latency_months_idx";
CREATE INDEX "usage_latency_months_idx" ON "usage_latency" ("start", "org_id", "model_id", "api_key_id", "mode", "kind", "metric", "bucket")
  INCLUDE ("tasks") WHERE "period" = 'month';

-- The usage functions of the usage migration, with the kind beside the mode (usage_latency_org has neither).
CREATE OR REPLACE FUNCTION usage_delta_statements(changes text) RETURNS text[] LANGUAGE sql IMMUTABLE AS $fn$
  SELECT ARRAY[
    format($q$
      INSERT INTO usage_count_deltas (org_id, hour, model_id, api_key_id, mode, kind, status, requests, prompt_tokens,
                                      completion_tokens, output_bytes)
      SELECT org_id, date_trunc('hour', queued_at, 'UTC'), model_id,
             coalesce(api_key_id, '00000000-0000-0000-0000-000000000000'), mode, kind, status, sum(sign),
             sum(sign * coalesce(prompt_tokens, 0)), sum(sign * coalesce(completion_tokens, 0)),
             sum(sign * coalesce(output_bytes, 0))
        FROM (%s) c
       WHERE status IN ('completed', 'failed', 'cancelled', 'timed_out')
       GROUP BY 1, 2, 3, 4, 5, 6, 7
      HAVING sum(sign) <> 0 OR sum(sign * coalesce(prompt_tokens, 0)) <> 0
          OR sum(sign * coalesce(completion_tokens, 0)) <> 0 OR sum(sign * coalesce(output_bytes, 0)) <> 0
    $q$, changes),
    format($q$
      INSERT INTO usage_latency_deltas (org_id, hour, model_id, api_key_id, mode, kind, metric, bucket, tasks)
      SELECT org_id, date_trunc('hour', queued_at, 'UTC'), model_id,
             coalesce(api_key_id, '00000000-0000-0000-0000-000000000000'), mode, kind, m.metric, usage_bucket(m.ms),
             sum(sign)
        FROM (%s) c,
             LATERAL (VALUES (0::smallint, usage_ms(c.queued_at, c.first_token_at)),
                             (1::smallint, usage_ms(c.queued_at, c.finished_at))) m (metric, ms)
       WHERE c.status = 'completed' AND m.ms IS NOT NULL
       GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
      HAVING sum(sign) <> 0
    $q$, changes)]
$fn$;

CREATE OR REPLACE FUNCTION usage_fold_deltas(max_rows integer) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  counts bigint;
  latencies bigint;
BEGIN
  IF NOT pg_try_advisory_xact_lock(7370160) THEN
    RETURN 0;
  END IF;

  WITH moved AS (
    DELETE FROM usage_count_deltas WHERE id IN (SELECT id FROM usage_count_deltas ORDER BY id LIMIT max_rows)
    RETURNING *
  ), summed AS (
    SELECT org_id, hour, model_id, api_key_id, mode, kind, status, sum(requests) AS requests,
           sum(prompt_tokens) AS prompt_tokens, sum(completion_tokens) AS completion_tokens,
           sum(output_bytes) AS output_bytes, count(*) AS n
      FROM moved GROUP BY 1, 2, 3, 4, 5, 6, 7
  ), added AS (
    INSERT INTO usage_counts AS u (org_id, period, start, model_id, api_key_id, mode, kind, status, requests,
                                   prompt_tokens, completion_tokens, output_bytes)
    SELECT s.org_id, p.period, date_trunc(p.period::text, s.hour, 'UTC'), s.model_id, s.api_key_id, s.mode, s.kind,
           s.status, sum(s.requests), sum(s.prompt_tokens), sum(s.completion_tokens), sum(s.output_bytes)
      FROM summed s CROSS JOIN unnest(enum_range(NULL::usage_period)) p (period)
     WHERE EXISTS (SELECT 1 FROM organizations o WHERE o.id = s.org_id)
     GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
    ON CONFLICT (org_id, period, start, model_id, api_key_id, mode, kind, status) DO UPDATE
      SET requests = u.requests + EXCLUDED.requests, prompt_tokens = u.prompt_tokens + EXCLUDED.prompt_tokens,
          completion_tokens = u.completion_tokens + EXCLUDED.completion_tokens,
          output_bytes = u.output_bytes + EXCLUDED.output_bytes
  )
  SELECT coalesce(sum(n), 0) INTO counts FROM summed;

  WITH moved AS (
    DELETE FROM usage_latency_deltas WHERE id IN (SELECT id FROM usage_latency_deltas ORDER BY id LIMIT max_rows)
    RETURNING *
  ), summed AS (
    SELECT org_id, hour, model_id, api_key_id, mode, kind, metric, bucket, sum(tasks) AS tasks, count(*) AS n
      FROM moved GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
  ), added AS (
    INSERT INTO usage_latency AS u (org_id, period, start, model_id, api_key_id, mode, kind, metric, bucket, tasks)
    SELECT s.org_id, p.period, date_trunc(p.period::text, s.hour, 'UTC'), s.model_id, s.api_key_id, s.mode, s.kind,
           s.metric, s.bucket, sum(s.tasks)
      FROM summed s CROSS JOIN unnest(enum_range(NULL::usage_period)) p (period)
     WHERE EXISTS (SELECT 1 FROM organizations o WHERE o.id = s.org_id)
     GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9
    ON CONFLICT (org_id, period, start, model_id, api_key_id, mode, kind, metric, bucket) DO UPDATE
      SET tasks = u.tasks + EXCLUDED.tasks
  ), whole AS (
    INSERT INTO usage_latency_org AS u (org_id, period, start, metric, bucket, tasks)
    SELECT s.org_id, p.period, date_trunc(p.period::text, s.hour, 'UTC'), s.metric, s.bucket, sum(s.tasks)
      FROM summed s CROSS JOIN unnest(enum_range(NULL::usage_period)) p (period)
     WHERE EXISTS (SELECT 1 FROM organizations o WHERE o.id = s.org_id)
     GROUP BY 1, 2, 3, 4, 5
    ON CONFLICT (org_id, period, start, metric, bucket) DO UPDATE SET tasks = u.tasks + EXCLUDED.tasks
  )
  SELECT coalesce(sum(n), 0) INTO latencies FROM summed;
  RETURN counts + latencies;
END $$;

CREATE OR REPLACE FUNCTION usage_rebuild() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  LOCK TABLE tasks IN SHARE MODE;
  PERFORM pg_advisory_xact_lock(7370160);
  TRUNCATE usage_count_deltas, usage_latency_deltas, usage_counts, usage_latency, usage_latency_org;
  WITH hourly AS MATERIALIZED (
    SELECT org_id, date_trunc('hour', queued_at, 'UTC') AS hour, model_id,
           coalesce(api_key_id, '00000000-0000-0000-0000-000000000000') AS api_key_id, mode, kind, status,
           count(*) AS requests, sum(coalesce(prompt_tokens, 0)) AS prompt_tokens,
           sum(coalesce(completion_tokens, 0)) AS completion_tokens, sum(coalesce(output_bytes, 0)) AS output_bytes
      FROM tasks WHERE status IN ('completed', 'failed', 'cancelled', 'timed_out')
     GROUP BY 1, 2, 3, 4, 5, 6, 7
  )
  INSERT INTO usage_counts (org_id, period, start, model_id, api_key_id, mode, kind, status, requests, prompt_tokens,
                            completion_tokens, output_bytes)
  SELECT h.org_id, p.period, date_trunc(p.period::text, h.hour, 'UTC'), h.model_id, h.api_key_id, h.mode, h.kind,
         h.status, sum(h.requests), sum(h.prompt_tokens), sum(h.completion_tokens), sum(h.output_bytes)
    FROM hourly h CROSS JOIN unnest(enum_range(NULL::usage_period)) p (period)
   GROUP BY 1, 2, 3, 4, 5, 6, 7, 8;
  WITH hourly AS MATERIALIZED (
    SELECT org_id, date_trunc('hour', queued_at, 'UTC') AS hour, model_id,
           coalesce(api_key_id, '00000000-0000-0000-0000-000000000000') AS api_key_id, mode, kind, m.metric,
           usage_bucket(m.ms) AS bucket, count(*) AS tasks
      FROM tasks,
           LATERAL (VALUES (0::smallint, usage_ms(queued_at, first_token_at)),
                           (1::smallint, usage_ms(queued_at, finished_at))) m (metric, ms)
     WHERE status = 'completed' AND m.ms IS NOT NULL
     GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
  )
  INSERT INTO usage_latency (org_id, period, start, model_id, api_key_id, mode, kind, metric, bucket, tasks)
  SELECT h.org_id, p.period, date_trunc(p.period::text, h.hour, 'UTC'), h.model_id, h.api_key_id, h.mode, h.kind,
         h.metric, h.bucket, sum(h.tasks)
    FROM hourly h CROSS JOIN unnest(enum_range(NULL::usage_period)) p (period)
   GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9;
  INSERT INTO usage_latency_org (org_id, period, start, metric, bucket, tasks)
  SELECT org_id, period, start, metric, bucket, sum(tasks) FROM usage_latency GROUP BY 1, 2, 3, 4, 5;
END $$;
