import type { Pool } from 'pg';
import { ENDED_STATUSES, sqlStatusList } from '../tasks/task-statuses';

/**
 * Rows one retention delete removes. Small enough that a batch holds its locks for milliseconds and
 * its WAL stays small, so the record writer's upserts and the usage folds never wait behind it.
 */
export const RETENTION_BATCH = 2_000;

/**
 * One batch of ended task records queued before `before`, oldest first, deleted in a transaction that
 * tells the delete trigger to leave the usage rollups alone (migration 20261206150000_task_retention):
 * the reports keep counting what retention removed. Rows another transaction holds are skipped (the
 * record writer may be updating one). Returns how many rows went.
 */
export async function deleteExpiredTasks(
  pool: Pick<Pool, 'connect'>,
  before: Date,
  limit = RETENTION_BATCH,
): Promise<number> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query("SET LOCAL switchyard.retention = 'on'");
    const { rowCount } = await client.query(
      `DELETE FROM tasks WHERE id IN (
         SELECT id FROM tasks WHERE queued_at < $1 AND status IN ${sqlStatusList(ENDED_STATUSES)}
         ORDER BY queued_at LIMIT $2 FOR UPDATE SKIP LOCKED)`,
      [before, limit],
    );
    await client.query('COMMIT');
    return rowCount ?? 0;
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
