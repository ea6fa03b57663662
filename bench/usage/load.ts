import type { Pool, PoolClient } from 'pg';

/** What the generated month looks like. */
export interface UsageDataSpec {
  /** Tasks of the big organization, spread evenly over the month. */
  bigTasks: number;
  /** Small organizations next to it (what the admin's all-organizations queries also read), and their tasks each. */
  smallOrgs: number;
  smallTasks: number;
  /** First instant of the month (UTC) and its length in days. */
  monthStart: string;
  days: number;
}

/** What loadMonth does beyond the month of its spec; the usage scenario uses neither. */
export interface LoadOptions {
  /** More months of tasks of the same organizations, generated the same way after the first. */
  more?: Pick<UsageDataSpec, 'bigTasks' | 'smallTasks' | 'monthStart' | 'days'>[];
  /**
   * The indexes and constraints of tasks put back after the load: `read`, the primary key and the three
   * a usage query reads (the default); `all`, every one (the foreign keys NOT VALID: the generated rows
   * reference the fixtures, and new rows are checked as always), so that the table is as the api writes it.
   */
  restore?: 'read' | 'all';
}

export const BIG_ORG = '00000000-0000-4000-8000-00000000b160';
/** Six models, used 50/25/12/7/4/2 %; the last is an embedding model (its tasks are `embedding`, the others `chat`). */
export const MODELS = [
  'bench-usage-a',
  'bench-usage-b',
  'bench-usage-c',
  'bench-usage-d',
  'bench-usage-e',
  'bench-usage-f',
];
const KEYS = 10;
/** Rows per INSERT: progress shows, and no statement holds the whole month in memory. */
const CHUNK = 1_000_000;

const keyId = (org: number, k: number) =>
  `00000000-0000-4000-8000-${org.toString(16).padStart(4, '0')}${k.toString(16).padStart(8, '0')}`;
const smallOrgId = (i: number) => `00000000-0000-4000-8000-${(0xa000 + i).toString(16).padStart(12, '0')}`;

/**
 * One task row per g, as SQL: model and key skewed (a few carry most traffic), 30 % direct, 96 %
 * completed (2 % failed, 1.5 % cancelled, 0.5 % timed out), time to first token log-normal around
 * 400 ms (p95 about 1.1 s), 1-800 completion tokens at 15-40 ms each, 4 bytes per token. random() is
 * seeded per connection (setseed), so a run generates the same month each time.
 */
const ROWS = (org: string, keyExpr: string) => `
INSERT INTO tasks (id, address, org_id, api_key_id, model_id, mode, kind, status, prompt_tokens, completion_tokens,
  output_bytes, usage_source, queued_at, first_token_at, finished_at, api, stream, attempts)
SELECT id, 'network:' || id, ${org}, ${keyExpr},
  (ARRAY['${MODELS.join("','")}'])[CASE WHEN r1 < 0.5 THEN 1 WHEN r1 < 0.75 THEN 2 WHEN r1 < 0.87 THEN 3
    WHEN r1 < 0.94 THEN 4 WHEN r1 < 0.98 THEN 5 ELSE 6 END],
  CASE WHEN r3 < 0.3 THEN 'direct' ELSE 'network' END::task_mode,
  CASE WHEN r1 < 0.98 THEN 'chat' ELSE 'embedding' END::task_kind,
  st::task_status, pt, ct, ct * 4, 'device', q,
  CASE WHEN st = 'completed' OR r6 < 0.5 THEN q + ttft * interval '1 millisecond' END,
  q + (ttft + ct * per_token) * interval '1 millisecond', 'openai', true, 1
FROM (
  SELECT g, gen_random_uuid() AS id, random() AS r1, random() AS r2, random() AS r3, random() AS r6,
    $2::timestamptz + ((g - 1) * $4::float8) * interval '1 millisecond' AS q,
    CASE WHEN r4 < 0.96 THEN 'completed' WHEN r4 < 0.98 THEN 'failed' WHEN r4 < 0.995 THEN 'cancelled'
      ELSE 'timed_out' END AS st,
    round(400 * exp(0.6 * sqrt(-2 * ln(greatest(r5, 1e-12))) * cos(2 * pi() * r7))) AS ttft,
    20 + floor(r8 * 1500)::int AS pt, 1 + floor(r9 * 800)::int AS ct, 15 + r10 * 25 AS per_token
  FROM (SELECT g, random() AS r4, random() AS r5, random() AS r7, random() AS r8, random() AS r9, random() AS r10
        FROM generate_series($3::bigint, $1::bigint) g) raw
) s`;

/** The tasks of one month: the big organization's in chunks of CHUNK rows, then the small ones'. */
async function insertMonth(client: PoolClient, spec: UsageDataSpec, log: (m: string) => void): Promise<void> {
  const monthMs = spec.days * 86_400_000;
  for (let lo = 1; lo <= spec.bigTasks; lo += CHUNK) {
    const hi = Math.min(spec.bigTasks, lo + CHUNK - 1);
    const keyExpr = `('{${Array.from({ length: KEYS }, (_, k) => keyId(0, k)).join(',')}}'::uuid[])[1 + floor(${KEYS} * r2 * r2)::int]`;
    // $3 is the chunk's first g; $4 the spacing that spreads all of them over the month.
    await client.query(ROWS(`'${BIG_ORG}'::uuid`, keyExpr), [hi, spec.monthStart, lo, monthMs / spec.bigTasks]);
    log(`usage: ${hi.toLocaleString('en')} of ${spec.bigTasks.toLocaleString('en')} tasks of the big organization`);
  }
  const small = spec.smallOrgs * spec.smallTasks;
  if (small > 0) {
    const orgs = `('{${Array.from({ length: spec.smallOrgs }, (_, i) => smallOrgId(i)).join(',')}}'::uuid[])`;
    const keysOf = `('{${Array.from({ length: spec.smallOrgs }, (_, i) => keyId(i + 1, 0)).join(',')}}'::uuid[])`;
    await client.query(ROWS(`${orgs}[1 + (g % ${spec.smallOrgs})]`, `${keysOf}[1 + (g % ${spec.smallOrgs})]`), [
      small,
      spec.monthStart,
      1,
      monthMs / small,
    ]);
  }
}

async function fixtures(client: PoolClient, spec: UsageDataSpec): Promise<void> {
  await client.query(`INSERT INTO organizations (id, name) VALUES ($1, 'bench-usage-big')`, [BIG_ORG]);
  await client.query(
    `INSERT INTO organizations (id, name) SELECT o, 'bench-usage-small-' || i FROM unnest($1::uuid[]) WITH ORDINALITY u(o, i)`,
    [Array.from({ length: spec.smallOrgs }, (_, i) => smallOrgId(i))],
  );
  await client.query(
    `INSERT INTO models (id, kind) SELECT m, CASE WHEN i = $2 THEN 'embedding' ELSE 'chat' END::model_kind
       FROM unnest($1::text[]) WITH ORDINALITY u(m, i)`,
    [MODELS, MODELS.length],
  );
  const keys = [
    ...Array.from({ length: KEYS }, (_, k) => [keyId(0, k), BIG_ORG]),
    ...Array.from({ length: spec.smallOrgs }, (_, i) => [keyId(i + 1, 0), smallOrgId(i)]),
  ];
  await client.query(
    `INSERT INTO api_keys (id, org_id, hash, prefix) SELECT k, o, 'bench-' || k, 'sy_bnch' FROM unnest($1::uuid[], $2::uuid[]) u(k, o)`,
    [keys.map((k) => k[0]), keys.map((k) => k[1])],
  );
}

/**
 * Fills the (freshly migrated, otherwise empty) usage bench database with a month of tasks, then builds
 * the rollups with usage_rebuild() (what the migration runs for existing tasks). For speed the load
 * runs without the triggers (their cost per write batch is measured apart, see writes.ts) and without
 * the indexes and foreign keys of tasks, of which a usage query reads three (re-created after the
 * load; every one with `restore: 'all'`). Returns the seconds each phase took.
 */
export async function loadMonth(pool: Pool, spec: UsageDataSpec, log: (m: string) => void, options: LoadOptions = {}) {
  const client = await pool.connect();
  const phases: Record<string, number> = {};
  const timed = async (name: string, fn: () => Promise<void>) => {
    const t0 = performance.now();
    await fn();
    phases[name] = (performance.now() - t0) / 1000;
  };
  try {
    await client.query(`SET work_mem = '256MB'`);
    await client.query('SELECT setseed(0.16)');
    await fixtures(client, spec);
    const indexes = await client.query<{ name: string; def: string }>(
      `SELECT indexname AS name, indexdef AS def FROM pg_indexes WHERE tablename = 'tasks'`,
    );
    const fks = await client.query<{ name: string; type: string; def: string }>(
      `SELECT conname AS name, contype AS type, pg_get_constraintdef(oid) AS def
         FROM pg_constraint WHERE conrelid = 'tasks'::regclass AND contype IN ('f', 'u', 'p')`,
    );
    for (const fk of fks.rows) {
      await client.query(`ALTER TABLE tasks DROP CONSTRAINT "${fk.name}"`);
    }
    for (const ix of indexes.rows) {
      await client.query(`DROP INDEX IF EXISTS "${ix.name}"`);
    }
    await client.query('ALTER TABLE tasks DISABLE TRIGGER USER');
    await timed('insert', async () => {
      for (const month of [spec, ...(options.more ?? [])]) {
        await insertMonth(client, { ...month, smallOrgs: spec.smallOrgs }, log);
      }
    });
    await client.query('ALTER TABLE tasks ENABLE TRIGGER USER');
    await timed('usage_rebuild()', async () => {
      await client.query('SELECT usage_rebuild()');
    });
    await timed('indexes', async () => {
      if (options.restore === 'all') {
        await restoreAll(client, indexes.rows, fks.rows);
        return;
      }
      // The three a usage query reads, and the primary key (the write measurement updates tasks by id).
      for (const ix of indexes.rows.filter((i) =>
        /(org_id, queued_at|\(queued_at\)|\(status\)|tasks_pkey)/.test(i.def),
      )) {
        await client.query(ix.def);
      }
    });
    await timed('vacuum analyze', async () => {
      for (const table of ['tasks', 'usage_counts', 'usage_latency', 'usage_latency_org']) {
        await client.query(`VACUUM ANALYZE ${table}`);
      }
    });
  } finally {
    client.release();
  }
  return phases;
}

/** Every index and constraint of tasks as it was before the load: keys first, then the other indexes, then the foreign keys. */
async function restoreAll(
  client: PoolClient,
  indexes: { name: string; def: string }[],
  constraints: { name: string; type: string; def: string }[],
): Promise<void> {
  await client.query(`SET maintenance_work_mem = '256MB'`);
  for (const c of constraints.filter((c) => c.type !== 'f')) {
    await client.query(`ALTER TABLE tasks ADD CONSTRAINT "${c.name}" ${c.def}`);
  }
  const present = new Set(
    (
      await client.query<{ name: string }>(`SELECT indexname AS name FROM pg_indexes WHERE tablename = 'tasks'`)
    ).rows.map((r) => r.name),
  );
  for (const ix of indexes.filter((i) => !present.has(i.name))) {
    await client.query(ix.def);
  }
  for (const c of constraints.filter((c) => c.type === 'f')) {
    await client.query(`ALTER TABLE tasks ADD CONSTRAINT "${c.name}" ${c.def} NOT VALID`);
  }
  await client.query('RESET maintenance_work_mem');
}
