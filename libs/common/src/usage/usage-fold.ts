import type { Pool } from 'pg';

/** Delta rows folded per call at most: one fold stays a short transaction even after a long outage. */
export const FOLD_MAX_ROWS = 100_000;

/**
 * Folds pending usage deltas into the rollups (the SQL function usage_fold_deltas, see the usage
 * migration); returns how many delta rows it folded, 0 when another fold holds the lock.
 */
export async function foldUsageDeltas(pool: Pick<Pool, 'query'>, maxRows = FOLD_MAX_ROWS): Promise<number> {
  const result = await pool.query<{ folded: string }>('SELECT usage_fold_deltas($1) AS folded', [maxRows]);
  return Number(result.rows[0]?.folded ?? 0);
}
