import type { Pool } from 'pg';
import { median } from '../lib/stats';
import { BIG_ORG, MODELS } from './load';

/** Batches per variant: enough for a stable median, few enough to stay a side measurement. */
const ROUNDS = 15;
/** The task writers' batch size (TaskRecordWriter reads up to 500 records at a time). */
export const BATCH = 500;

export interface WriteCost {
  /** Median ms per batch: a batch of new queued tasks inserted, then the same tasks updated to completed. */
  insertQueued: { on: number; off: number };
  updateCompleted: { on: number; off: number };
  /** The fold of the deltas those batches appended: tasks, delta rows, ms. */
  fold: { tasks: number; rows: number; ms: number };
}

const TRIGGERS = ['usage_tasks_inserted', 'usage_tasks_updated'];

/**
 * What the usage triggers cost the task writes: the same batches with the triggers enabled and
 * disabled, alternating (so that drift of the machine hits both). Inserting queued tasks is the
 * path that touches no ended task (the triggers return after one scan); updating them to completed
 * is the one that appends deltas. Then the fold of those deltas into the rollups (the api's background
 * work), timed once.
 */
export async function measureWriteCost(pool: Pool): Promise<WriteCost> {
  const client = await pool.connect();
  const samples = {
    insertOn: [] as number[],
    insertOff: [] as number[],
    updateOn: [] as number[],
    updateOff: [] as number[],
  };
  let fold = { tasks: 0, rows: 0, ms: 0 };
  const time = async (sql: string, values: unknown[]) => {
    const t0 = performance.now();
    await client.query(sql, values);
    return performance.now() - t0;
  };
  try {
    for (let round = 0; round < ROUNDS; round++) {
      for (const on of round % 2 === 0 ? [true, false] : [false, true]) {
        for (const trigger of TRIGGERS) {
          await client.query(`ALTER TABLE tasks ${on ? 'ENABLE' : 'DISABLE'} TRIGGER ${trigger}`);
        }
        const ids = await client.query<{ id: string }>(`SELECT gen_random_uuid() AS id FROM generate_series(1, $1)`, [
          BATCH,
        ]);
        const values = [ids.rows.map((r) => r.id), BIG_ORG, MODELS];
        // Spread like live traffic of a few minutes: models, modes and latencies vary, the hour does not.
        const inserted = await time(
          `INSERT INTO tasks (id, address, org_id, model_id, mode, status, queued_at, api, stream)
           SELECT id, 'network:' || id, $2, ($3::text[])[1 + floor(random() * 6)::int],
                  CASE WHEN random() < 0.3 THEN 'direct' ELSE 'network' END::task_mode, 'queued',
                  '2026-12-15T10:00:00Z'::timestamptz + random() * interval '10 minutes', 'openai', true
             FROM unnest($1::uuid[]) id`,
          values,
        );
        const updated = await time(
          `UPDATE tasks SET status = 'completed', prompt_tokens = 100, completion_tokens = 200, output_bytes = 800,
             first_token_at = queued_at + (200 + random() * 800) * interval '1 ms',
             finished_at = queued_at + (2000 + random() * 20000) * interval '1 ms'
           WHERE id = ANY($1::uuid[])`,
          [values[0]],
        );
        (on ? samples.insertOn : samples.insertOff).push(inserted);
        (on ? samples.updateOn : samples.updateOff).push(updated);
      }
    }
    const t0 = performance.now();
    const folded = await client.query<{ n: string }>('SELECT usage_fold_deltas(1000000) AS n');
    fold = { tasks: samples.updateOn.length * BATCH, rows: Number(folded.rows[0].n), ms: performance.now() - t0 };
  } finally {
    for (const trigger of TRIGGERS) {
      await client.query(`ALTER TABLE tasks ENABLE TRIGGER ${trigger}`).catch(() => undefined);
    }
    client.release();
  }
  return {
    insertQueued: { on: median(samples.insertOn), off: median(samples.insertOff) },
    updateCompleted: { on: median(samples.updateOn), off: median(samples.updateOff) },
    fold,
  };
}
