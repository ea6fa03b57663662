-- Task retention (issue 39): the api deletes ended task records older than TASK_RETENTION_DAYS in small
-- batches (libs/common usage/task-retention.ts), each in a transaction that sets
-- `switchyard.retention = 'on'`. Those deletes are not corrections: the usage rollups keep the counts of
-- the tasks they remove, so the delete trigger leaves them alone. Any other delete still takes its tasks
-- out of the rollups, as before. (Nothing in schema.prisma changes: Prisma does not model functions.)
CREATE OR REPLACE FUNCTION usage_tasks_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE q text;
BEGIN
  IF current_setting('switchyard.retention', true) = 'on' THEN
    RETURN NULL;
  END IF;
  IF EXISTS (SELECT 1 FROM usage_old WHERE status IN ('completed', 'failed', 'cancelled', 'timed_out')) THEN
    FOREACH q IN ARRAY usage_delta_statements('SELECT t.*, -1 AS sign FROM usage_old t') LOOP
      EXECUTE q;
    END LOOP;
  END IF;
  RETURN NULL;
END $$;
