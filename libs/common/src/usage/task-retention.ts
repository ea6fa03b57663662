import type { Pool } from 'pg';
import { ENDED_STATUSES, sqlStatusList } from '../tasks/task-statuses';

/**
 * Rows one retention delete removes. Small enough that a batch holds its locks for milliseconds and
 * its WAL stays small, so the record writer's upserts and the usage folds never wait behind it.
 */
export const RETENTION_BATCH = 2_000;

/** What one batch removed: how many rows, and the latest `queued_at` among them (null: none). */
export interface RetentionBatch {
  deleted: number;
  last: Date | null;
}

/**
 * One batch of ended task records queued in [`from`, `before`), oldest first, deleted in a transaction
 * that tells the delete trigger to leave the usage rollups alone (migration
 * 20261206150000_task_retention): the reports keep counting what retention removed. Rows another
 * transaction holds are skipped (the record writer may be updating one). A pass gives each batch the
 * `last` of the one before as its `from`, so that the index scan starts past what it deleted instead of
 * stepping over the dead entries of every earlier batch (they stay in the index until a vacuum).
 */
export async function deleteExpiredTasks(
  pool: Pick<Pool, 'connect'>,
  before: Date,
  from: Date | null = null,
  limit = RETENTION_BATCH,
): Promise<RetentionBatch> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query("SET LOCAL switchyard.retention = 'on'");
    const { rows } = await client.query<{ last: Date | null; deleted: string }>(
      `WITH doomed AS (
         SELECT id FROM tasks
         WHERE queued_at < $1 AND queued_at >= $2 AND status IN ${sqlStatusList(ENDED_STATUSES)}
         ORDER BY queued_at LIMIT $3 FOR UPDATE SKIP LOCKED),
       gone AS (DELETE FROM tasks t USING doomed WHERE t.id = doomed.id RETURNING t.queued_at)
       SELECT max(queued_at) AS last, count(*) AS deleted FROM gone`,
      [before, from ?? new Date(0), limit],
    );
    await client.query('COMMIT');
    return { deleted: Number(rows[0].deleted), last: rows[0].last };
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.release();
  }
}

/** The cutoff of `days` of retention at `now`: records queued before it may go. */
export function retentionCutoff(now: number, days: number): Date {
  return new Date(now - days * 86_400_000);
}
