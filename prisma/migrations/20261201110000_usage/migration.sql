-- CreateEnum
CREATE TYPE "usage_period" AS ENUM ('hour', 'day', 'month');

-- AlterTable
ALTER TABLE "tasks" ADD COLUMN     "output_bytes" BIGINT,
ADD COLUMN     "usage_source" TEXT;

-- CreateTable
CREATE TABLE "usage_counts" (
    "org_id" UUID NOT NULL,
    "period" "usage_period" NOT NULL,
    "start" TIMESTAMPTZ(3) NOT NULL,
    "model_id" TEXT NOT NULL,
    "api_key_id" UUID NOT NULL,
    "mode" "task_mode" NOT NULL,
    "status" "task_status" NOT NULL,
    "requests" INTEGER NOT NULL,
    "prompt_tokens" BIGINT NOT NULL,
    "completion_tokens" BIGINT NOT NULL,
    "output_bytes" BIGINT NOT NULL,

    CONSTRAINT "usage_counts_pkey" PRIMARY KEY ("org_id","period","start","model_id","api_key_id","mode","status")
);

-- CreateTable
CREATE TABLE "usage_latency" (
    "org_id" UUID NOT NULL,
    "period" "usage_period" NOT NULL,
    "start" TIMESTAMPTZ(3) NOT NULL,
    "model_id" TEXT NOT NULL,
    "api_key_id" UUID NOT NULL,
    "mode" "task_mode" NOT NULL,
    "metric" SMALLINT NOT NULL,
    "bucket" SMALLINT NOT NULL,
    "tasks" INTEGER NOT NULL,

    CONSTRAINT "usage_latency_pkey" PRIMARY KEY ("org_id","period","start","model_id","api_key_id","mode","metric","bucket")
);

-- CreateTable
CREATE TABLE "usage_latency_org" (
    "org_id" UUID NOT NULL,
    "period" "usage_period" NOT NULL,
    "start" TIMESTAMPTZ(3) NOT NULL,
    "metric" SMALLINT NOT NULL,
    "bucket" SMALLINT NOT NULL,
    "tasks" INTEGER NOT NULL,

    CONSTRAINT "usage_latency_org_pkey" PRIMARY KEY ("org_id","period","start","metric","bucket")
);

-- CreateTable
CREATE TABLE "usage_count_deltas" (
    "id" BIGSERIAL NOT NULL,
    "org_id" UUID NOT NULL,
    "hour" TIMESTAMPTZ(3) NOT NULL,
    "model_id" TEXT NOT NULL,
    "api_key_id" UUID NOT NULL,
    "mode" "task_mode" NOT NULL,
    "status" "task_status" NOT NULL,
    "requests" INTEGER NOT NULL,
    "prompt_tokens" BIGINT NOT NULL,
    "completion_tokens" BIGINT NOT NULL,
    "output_bytes" BIGINT NOT NULL,

    CONSTRAINT "usage_count_deltas_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "usage_latency_deltas" (
    "id" BIGSERIAL NOT NULL,
    "org_id" UUID NOT NULL,
    "hour" TIMESTAMPTZ(3) NOT NULL,
    "model_id" TEXT NOT NULL,
    "api_key_id" UUID NOT NULL,
    "mode" "task_mode" NOT NULL,
    "metric" SMALLINT NOT NULL,
    "bucket" SMALLINT NOT NULL,
    "tasks" INTEGER NOT NULL,

    CONSTRAINT "usage_latency_deltas_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "usage_counts_period_start_idx" ON "usage_counts"("period", "start");

-- CreateIndex
CREATE INDEX "usage_latency_period_start_idx" ON "usage_latency"("period", "start");

-- CreateIndex
CREATE INDEX "usage_latency_org_period_start_idx" ON "usage_latency_org"("period", "start");

-- CreateIndex
CREATE INDEX "tasks_queued_at_idx" ON "tasks"("queued_at");

-- AddForeignKey
ALTER TABLE "usage_counts" ADD CONSTRAINT "usage_counts_org_id_fkey" FOREIGN KEY ("org_id") REFERENCES "organizations"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "usage_latency" ADD CONSTRAINT "usage_latency_org_id_fkey" FOREIGN KEY ("org_id") REFERENCES "organizations"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "usage_latency_org" ADD CONSTRAINT "usage_latency_org_org_id_fkey" FOREIGN KEY ("org_id") REFERENCES "organizations"("id") ON DELETE CASCADE ON UPDATE CASCADE;


-- Usage rollups: what Prisma's schema cannot say (covering keys, functions, triggers). See
-- docs/architecture.md, "Usage".

-- The primary keys carry the values too (INCLUDE), so that a report reads the rollups by index only:
-- a month of one organization's rows is then a few contiguous index pages instead of tens of thousands
-- of scattered heap pages. (Prisma's schema has no INCLUDE; its @@id names the same key columns.)
ALTER TABLE "usage_counts" DROP CONSTRAINT "usage_counts_pkey",
  ADD CONSTRAINT "usage_counts_pkey" PRIMARY KEY ("org_id", "period", "start", "model_id", "api_key_id", "mode", "status")
  INCLUDE ("requests", "prompt_tokens", "completion_tokens", "output_bytes");
ALTER TABLE "usage_latency" DROP CONSTRAINT "usage_latency_pkey",
  ADD CONSTRAINT "usage_latency_pkey" PRIMARY KEY ("org_id", "period", "start", "model_id", "api_key_id", "mode", "metric", "bucket")
  INCLUDE ("tasks");
ALTER TABLE "usage_latency_org" DROP CONSTRAINT "usage_latency_org_pkey",
  ADD CONSTRAINT "usage_latency_org_pkey" PRIMARY KEY ("org_id", "period", "start", "metric", "bucket") INCLUDE ("tasks");
-- The admin's reports over every organization read a month's rows of all of them: an index of the month
-- rows alone, by start, covering them too (a small fraction of the table).
CREATE INDEX "usage_latency_months_idx" ON "usage_latency" ("start", "org_id", "model_id", "api_key_id", "mode", "metric", "bucket")
  INCLUDE ("tasks") WHERE "period" = 'month';

-- Milliseconds from a to b; null when either is null; clock skew between processes never makes it
-- negative. The task times are whole milliseconds (timestamptz(3)): rounding removes the float error
-- of date_part (a numeric extract() would be exact too, and several times slower over millions of rows).
CREATE FUNCTION usage_ms(a timestamptz, b timestamptz) RETURNS double precision
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  AS $$ SELECT CASE WHEN b >= a THEN round(date_part('epoch', b - a) * 1000) WHEN b < a THEN 0 END $$;

-- The latency histogram's bucket of a duration in ms: whole milliseconds below 128 ms, then buckets
-- 4.08 % wide (gamma = 1.02 / 0.98), so that a bucket's value (usage_bucket_value) is within 2 % of
-- every duration in it. 128 + 400 buckets reach 128 ms * gamma^400, about 11 days.
CREATE FUNCTION usage_bucket(ms double precision) RETURNS smallint
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  AS $$ SELECT CASE WHEN ms < 128 THEN floor(ms)::smallint
                    ELSE least(128 + floor(ln(ms / 128) / ln(1.02::double precision / 0.98)), 32767)::smallint END $$;

-- The value a bucket stands for: the duration itself below 128 ms, else 1.02 times the bucket's lower bound.
CREATE FUNCTION usage_bucket_value(bucket smallint) RETURNS double precision
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  AS $$ SELECT CASE WHEN bucket < 128 THEN bucket::double precision
                    ELSE 128 * power(1.02::double precision / 0.98, bucket - 128) * 1.02 END $$;

-- The two statements that append what a statement on tasks changed in the usage of ended tasks to the
-- delta tables. `changes` selects the rows the statement wrote (sign +1) and the rows it replaced or
-- deleted (sign -1); only ended tasks count (tasks in flight are read from tasks itself). Append-only:
-- concurrent writers never wait for each other here; the api folds the deltas into the rollups.
-- (Built as text because a trigger's transition tables are visible only to statements the trigger
-- function itself runs.)
CREATE FUNCTION usage_delta_statements(changes text) RETURNS text[] LANGUAGE sql IMMUTABLE AS $fn$
  SELECT ARRAY[
    format($q$
      INSERT INTO usage_count_deltas (org_id, hour, model_id, api_key_id, mode, status, requests, prompt_tokens,
                                      completion_tokens, output_bytes)
      SELECT org_id, date_trunc('hour', queued_at, 'UTC'), model_id,
             coalesce(api_key_id, '00000000-0000-0000-0000-000000000000'), mode, status, sum(sign),
             sum(sign * coalesce(prompt_tokens, 0)), sum(sign * coalesce(completion_tokens, 0)),
             sum(sign * coalesce(output_bytes, 0))
        FROM (%s) c
       WHERE status IN ('completed', 'failed', 'cancelled', 'timed_out')
       GROUP BY 1, 2, 3, 4, 5, 6
      HAVING sum(sign) <> 0 OR sum(sign * coalesce(prompt_tokens, 0)) <> 0
          OR sum(sign * coalesce(completion_tokens, 0)) <> 0 OR sum(sign * coalesce(output_bytes, 0)) <> 0
    $q$, changes),
    format($q$
      INSERT INTO usage_latency_deltas (org_id, hour, model_id, api_key_id, mode, metric, bucket, tasks)
      SELECT org_id, date_trunc('hour', queued_at, 'UTC'), model_id,
             coalesce(api_key_id, '00000000-0000-0000-0000-000000000000'), mode, m.metric, usage_bucket(m.ms),
             sum(sign)
        FROM (%s) c,
             LATERAL (VALUES (0::smallint, usage_ms(c.queued_at, c.first_token_at)),
                             (1::smallint, usage_ms(c.queued_at, c.finished_at))) m (metric, ms)
       WHERE c.status = 'completed' AND m.ms IS NOT NULL
       GROUP BY 1, 2, 3, 4, 5, 6, 7
      HAVING sum(sign) <> 0
    $q$, changes)]
$fn$;

-- The trigger functions return at once when the statement touched no ended task (most writes: a task
-- queued, assigned, streaming), so that those cost one small scan of the statement's own rows.
CREATE FUNCTION usage_tasks_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE q text;
BEGIN
  IF EXISTS (SELECT 1 FROM usage_new WHERE status IN ('completed', 'failed', 'cancelled', 'timed_out')) THEN
    FOREACH q IN ARRAY usage_delta_statements('SELECT t.*, 1 AS sign FROM usage_new t') LOOP
      EXECUTE q;
    END LOOP;
  END IF;
  RETURN NULL;
END $$;

CREATE FUNCTION usage_tasks_updated() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE q text;
BEGIN
  IF EXISTS (SELECT 1 FROM usage_new WHERE status IN ('completed', 'failed', 'cancelled', 'timed_out'))
     OR EXISTS (SELECT 1 FROM usage_old WHERE status IN ('completed', 'failed', 'cancelled', 'timed_out')) THEN
    FOREACH q IN ARRAY usage_delta_statements(
        'SELECT t.*, 1 AS sign FROM usage_new t UNION ALL SELECT t.*, -1 FROM usage_old t') LOOP
      EXECUTE q;
    END LOOP;
  END IF;
  RETURN NULL;
END $$;

CREATE FUNCTION usage_tasks_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE q text;
BEGIN
  IF EXISTS (SELECT 1 FROM usage_old WHERE status IN ('completed', 'failed', 'cancelled', 'timed_out')) THEN
    FOREACH q IN ARRAY usage_delta_statements('SELECT t.*, -1 AS sign FROM usage_old t') LOOP
      EXECUTE q;
    END LOOP;
  END IF;
  RETURN NULL;
END $$;

-- Statement-level: one run per statement, however many rows it wrote (the task writers batch).
CREATE TRIGGER usage_tasks_inserted AFTER INSERT ON tasks REFERENCING NEW TABLE AS usage_new
  FOR EACH STATEMENT EXECUTE FUNCTION usage_tasks_inserted();
CREATE TRIGGER usage_tasks_updated AFTER UPDATE ON tasks REFERENCING OLD TABLE AS usage_old NEW TABLE AS usage_new
  FOR EACH STATEMENT EXECUTE FUNCTION usage_tasks_updated();
CREATE TRIGGER usage_tasks_deleted AFTER DELETE ON tasks REFERENCING OLD TABLE AS usage_old
  FOR EACH STATEMENT EXECUTE FUNCTION usage_tasks_deleted();

-- Folds the deltas into the rollups, at every period: called by the api every few seconds; safe to call
-- from anywhere at any time. Deletes and adds in one transaction, so a usage query sees each change
-- exactly once. One fold at a time (a transaction-level advisory lock; a caller that finds it taken
-- returns 0 at once): two folds would upsert the same rollup rows in different orders. Deltas of
-- organizations deleted meanwhile are dropped. Returns how many delta rows it folded.
CREATE FUNCTION usage_fold_deltas(max_rows integer) RETURNS bigint LANGUAGE plpgsql AS $$
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
    SELECT org_id, hour, model_id, api_key_id, mode, status, sum(requests) AS requests,
           sum(prompt_tokens) AS prompt_tokens, sum(completion_tokens) AS completion_tokens,
           sum(output_bytes) AS output_bytes, count(*) AS n
      FROM moved GROUP BY 1, 2, 3, 4, 5, 6
  ), added AS (
    INSERT INTO usage_counts AS u (org_id, period, start, model_id, api_key_id, mode, status, requests, prompt_tokens,
                                   completion_tokens, output_bytes)
    SELECT s.org_id, p.period, date_trunc(p.period::text, s.hour, 'UTC'), s.model_id, s.api_key_id, s.mode, s.status,
           sum(s.requests), sum(s.prompt_tokens), sum(s.completion_tokens), sum(s.output_bytes)
      FROM summed s CROSS JOIN unnest(enum_range(NULL::usage_period)) p (period)
     WHERE EXISTS (SELECT 1 FROM organizations o WHERE o.id = s.org_id)
     GROUP BY 1, 2, 3, 4, 5, 6, 7
    ON CONFLICT (org_id, period, start, model_id, api_key_id, mode, status) DO UPDATE
      SET requests = u.requests + EXCLUDED.requests, prompt_tokens = u.prompt_tokens + EXCLUDED.prompt_tokens,
          completion_tokens = u.completion_tokens + EXCLUDED.completion_tokens,
          output_bytes = u.output_bytes + EXCLUDED.output_bytes
  )
  SELECT coalesce(sum(n), 0) INTO counts FROM summed;

  WITH moved AS (
    DELETE FROM usage_latency_deltas WHERE id IN (SELECT id FROM usage_latency_deltas ORDER BY id LIMIT max_rows)
    RETURNING *
  ), summed AS (
    SELECT org_id, hour, model_id, api_key_id, mode, metric, bucket, sum(tasks) AS tasks, count(*) AS n
      FROM moved GROUP BY 1, 2, 3, 4, 5, 6, 7
  ), added AS (
    INSERT INTO usage_latency AS u (org_id, period, start, model_id, api_key_id, mode, metric, bucket, tasks)
    SELECT s.org_id, p.period, date_trunc(p.period::text, s.hour, 'UTC'), s.model_id, s.api_key_id, s.mode, s.metric,
           s.bucket, sum(s.tasks)
      FROM summed s CROSS JOIN unnest(enum_range(NULL::usage_period)) p (period)
     WHERE EXISTS (SELECT 1 FROM organizations o WHERE o.id = s.org_id)
     GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
    ON CONFLICT (org_id, period, start, model_id, api_key_id, mode, metric, bucket) DO UPDATE
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

-- Rebuilds the rollups from the tasks table: for a database that had tasks before this migration, and
-- for an operator who changed tasks behind the triggers' back (TRUNCATE, or triggers disabled). Holds a
-- SHARE lock on tasks meanwhile (writers wait; readers do not), so nothing is counted twice or missed;
-- usage reports wait for it too (the rollups are truncated: far faster than deleting every row).
CREATE FUNCTION usage_rebuild() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  LOCK TABLE tasks IN SHARE MODE;
  PERFORM pg_advisory_xact_lock(7370160);
  TRUNCATE usage_count_deltas, usage_latency_deltas, usage_counts, usage_latency, usage_latency_org;
  WITH hourly AS MATERIALIZED (
    SELECT org_id, date_trunc('hour', queued_at, 'UTC') AS hour, model_id,
           coalesce(api_key_id, '00000000-0000-0000-0000-000000000000') AS api_key_id, mode, status,
           count(*) AS requests, sum(coalesce(prompt_tokens, 0)) AS prompt_tokens,
           sum(coalesce(completion_tokens, 0)) AS completion_tokens, sum(coalesce(output_bytes, 0)) AS output_bytes
      FROM tasks WHERE status IN ('completed', 'failed', 'cancelled', 'timed_out')
     GROUP BY 1, 2, 3, 4, 5, 6
  )
  INSERT INTO usage_counts (org_id, period, start, model_id, api_key_id, mode, status, requests, prompt_tokens,
                            completion_tokens, output_bytes)
  SELECT h.org_id, p.period, date_trunc(p.period::text, h.hour, 'UTC'), h.model_id, h.api_key_id, h.mode, h.status,
         sum(h.requests), sum(h.prompt_tokens), sum(h.completion_tokens), sum(h.output_bytes)
    FROM hourly h CROSS JOIN unnest(enum_range(NULL::usage_period)) p (period)
   GROUP BY 1, 2, 3, 4, 5, 6, 7;
  WITH hourly AS MATERIALIZED (
    SELECT org_id, date_trunc('hour', queued_at, 'UTC') AS hour, model_id,
           coalesce(api_key_id, '00000000-0000-0000-0000-000000000000') AS api_key_id, mode, m.metric,
           usage_bucket(m.ms) AS bucket, count(*) AS tasks
      FROM tasks,
           LATERAL (VALUES (0::smallint, usage_ms(queued_at, first_token_at)),
                           (1::smallint, usage_ms(queued_at, finished_at))) m (metric, ms)
     WHERE status = 'completed' AND m.ms IS NOT NULL
     GROUP BY 1, 2, 3, 4, 5, 6, 7
  )
  INSERT INTO usage_latency (org_id, period, start, model_id, api_key_id, mode, metric, bucket, tasks)
  SELECT h.org_id, p.period, date_trunc(p.period::text, h.hour, 'UTC'), h.model_id, h.api_key_id, h.mode, h.metric,
         h.bucket, sum(h.tasks)
    FROM hourly h CROSS JOIN unnest(enum_range(NULL::usage_period)) p (period)
   GROUP BY 1, 2, 3, 4, 5, 6, 7, 8;
  INSERT INTO usage_latency_org (org_id, period, start, metric, bucket, tasks)
  SELECT org_id, period, start, metric, bucket, sum(tasks) FROM usage_latency GROUP BY 1, 2, 3, 4, 5;
END $$;

-- The tasks recorded before this migration.
SELECT usage_rebuild();
