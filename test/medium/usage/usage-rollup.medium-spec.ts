import { randomUUID } from 'node:crypto';
import { Pool } from 'pg';
import { AdminService, UsageService, foldUsageDeltas, parseUsageQuery, ADMIN_USAGE_GROUPS } from '@app/common';
import type { UsageGroup } from '@app/common';
import { DATABASE_URL, closeDb, db, uniq } from '../../support/stack';

/** A small deterministic PRNG (mulberry32): the same rows on every run. */
function prng(seed: number) {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const STATUSES = ['completed', 'completed', 'completed', 'failed', 'cancelled', 'timed_out', 'queued', 'streaming'];
/** This suite's own month (far from the "now" other suites write tasks at), so that admin totals are ours alone. */
const MONTH = Date.UTC(2031, 2, 1);
const DAY = 86_400_000;

/**
 * The usage rollups against the tasks they summarise: whatever the tasks table went through (inserts,
 * upserts, rewrites, deletes, folds or not), a report from the rollups equals the one computed from the
 * tasks alone, for every grouping and for ranges that cut hours and days.
 */
describe('usage rollups (Postgres)', () => {
  let pool: Pool;
  let usage: UsageService;
  const orgs: { id: string; name: string }[] = [];
  const models = [uniq('usage-model-a'), uniq('usage-model-b')];
  const keys: string[] = [];

  const rows = (orgId: string, n: number, rand: () => number) =>
    Array.from({ length: n }, () => {
      const id = randomUUID();
      const status = STATUSES[Math.floor(rand() * STATUSES.length)];
      const queuedAt = new Date(MONTH + Math.floor(rand() * 3 * DAY) + Math.floor(rand() * 1000));
      const ended = !['queued', 'streaming'].includes(status);
      const ttft = Math.floor(rand() * 3000);
      const firstToken = status === 'queued' || rand() < 0.1 ? null : new Date(queuedAt.getTime() + ttft);
      return {
        id,
        address: `network:${id}`,
        orgId,
        apiKeyId: rand() < 0.15 ? null : keys[Math.floor(rand() * keys.length)],
        modelId: models[Math.floor(rand() * models.length)],
        mode: rand() < 0.5 ? ('network' as const) : ('direct' as const),
        kind: rand() < 0.3 ? ('embedding' as const) : ('chat' as const),
        api: 'openai' as const,
        stream: true,
        status: status as never,
        promptTokens: rand() < 0.1 ? null : Math.floor(rand() * 500),
        completionTokens: rand() < 0.1 ? null : Math.floor(rand() * 900),
        outputBytes: rand() < 0.2 ? null : BigInt(Math.floor(rand() * 5000)),
        queuedAt,
        firstTokenAt: firstToken,
        finishedAt: ended ? new Date(queuedAt.getTime() + ttft + Math.floor(rand() * 40_000)) : null,
      };
    });

  const both = async (groupBy: string, from: string, to: string, orgId: string | null) => {
    const query = parseUsageQuery({ group_by: groupBy, from, to }, ADMIN_USAGE_GROUPS);
    const [auto, raw] = await Promise.all([usage.report(query, orgId), usage.report(query, orgId, { rawOnly: true })]);
    return { auto, raw };
  };

  const GROUPINGS = [
    '',
    'model',
    'key',
    'day',
    'hour',
    'mode',
    'kind',
    'status',
    'model,day',
    'status,key,mode',
    'org,model',
    'kind,day',
    'org,kind,status',
  ];
  const RANGES: [string, string][] = [
    ['2031-03-01', '2031-04-01'],
    ['2031-03-01T10:30:00Z', '2031-03-03T07:15:00.5Z'],
    ['2031-03-02T05:10:00+02:00', '2031-03-02T05:50:00+02:00'],
    ['2031-03-02', '2031-03-03T00:00:00Z'],
    // Months, days and hours on both sides.
    ['2031-02-27T22:20:00Z', '2031-04-02T03:00:00Z'],
  ];

  async function expectRollupsMatchTasks() {
    for (const [from, to] of RANGES) {
      for (const groupBy of GROUPINGS) {
        for (const orgId of [orgs[0].id, null]) {
          const { auto, raw } = await both(groupBy, from, to, orgId);
          expect({ groupBy, from, to, orgId, data: auto.data }).toEqual({ groupBy, from, to, orgId, data: raw.data });
        }
      }
    }
  }

  beforeAll(async () => {
    pool = new Pool({ connectionString: DATABASE_URL, max: 4 });
    usage = new UsageService(pool);
    const admin = new AdminService(db());
    for (const model of models) {
      await admin.models.add({ id: model });
    }
    for (let i = 0; i < 2; i++) {
      orgs.push(await admin.orgs.create(uniq('usage-org')));
    }
    for (let i = 0; i < 3; i++) {
      keys.push((await admin.keys.create({ org: orgs[0].name, label: `k${i}` })).id);
    }
    const rand = prng(16);
    // Several statements, as task writers batch them; some rows of org 1 too (isolation).
    for (let batch = 0; batch < 4; batch++) {
      await db().task.createMany({ data: rows(orgs[batch % 2].id, 500, rand) });
    }
  });

  afterAll(async () => {
    await pool.end();
    await closeDb();
  });

  it('reports from the rollups equal reports from the tasks, before and after folding', async () => {
    await expectRollupsMatchTasks();
    while ((await foldUsageDeltas(pool)) > 0) {
      // drain
    }
    await expectRollupsMatchTasks();
  });

  it('stays equal through rewrites: ended tasks changed, moved to another hour, ended late, deleted', async () => {
    const org = orgs[0].id;
    await db().$executeRaw`UPDATE tasks SET completion_tokens = coalesce(completion_tokens, 0) + 7, output_bytes = 11
      WHERE org_id = ${org}::uuid AND status = 'completed' AND prompt_tokens % 3 = 0`;
    await db().$executeRaw`UPDATE tasks SET queued_at = queued_at + interval '90 minutes'
      WHERE org_id = ${org}::uuid AND prompt_tokens % 5 = 0`;
    await db().$executeRaw`UPDATE tasks SET status = 'completed', finished_at = queued_at + interval '2 seconds',
      first_token_at = queued_at + interval '150 milliseconds' WHERE org_id = ${org}::uuid AND status = 'streaming'`;
    await db().$executeRaw`DELETE FROM tasks WHERE org_id = ${org}::uuid AND prompt_tokens % 7 = 0`;
    // Not something Switchyard does (a task keeps its kind), but the rollups follow whatever tasks hold.
    await db().$executeRaw`UPDATE tasks SET kind = CASE kind WHEN 'chat' THEN 'embedding' ELSE 'chat' END::task_kind
      WHERE org_id = ${org}::uuid AND status <> 'queued' AND prompt_tokens % 11 = 0`;
    await expectRollupsMatchTasks();
    while ((await foldUsageDeltas(pool)) > 0) {
      // drain
    }
    await expectRollupsMatchTasks();
  });

  it('usage_rebuild() (what the migration runs for existing tasks) makes the same rollups', async () => {
    await pool.query('SELECT usage_rebuild()');
    await expectRollupsMatchTasks();
  });

  it('percentiles are percentile_cont over the bucket values, and within 2 % of the exact ones', async () => {
    const org = orgs[0].id;
    const report = await usage.report(
      parseUsageQuery({ group_by: 'model', from: '2031-03-01', to: '2031-04-01' }, ADMIN_USAGE_GROUPS),
      org,
    );
    const reference = await pool.query<Record<string, number | string>>(
      `SELECT model_id,
         percentile_cont(0.5) WITHIN GROUP (ORDER BY usage_bucket_value(usage_bucket(usage_ms(queued_at, first_token_at)))) AS b50,
         percentile_cont(0.95) WITHIN GROUP (ORDER BY usage_bucket_value(usage_bucket(usage_ms(queued_at, first_token_at)))) AS b95,
         percentile_cont(0.5) WITHIN GROUP (ORDER BY usage_ms(queued_at, first_token_at)) AS e50,
         percentile_cont(0.95) WITHIN GROUP (ORDER BY usage_ms(queued_at, first_token_at)) AS e95
       FROM tasks WHERE org_id = $1 AND status = 'completed' AND first_token_at IS NOT NULL
         AND queued_at >= '2031-03-01' AND queued_at < '2031-04-01'
       GROUP BY model_id ORDER BY model_id`,
      [org],
    );
    expect(reference.rows.length).toBe(2);
    for (const ref of reference.rows) {
      const row = report.data.find((r) => r.model === ref.model_id)!;
      const ttft = row.ttft_ms as { p50: number; p95: number };
      expect(ttft.p50).toBe(Math.round(Number(ref.b50) * 10) / 10);
      expect(ttft.p95).toBe(Math.round(Number(ref.b95) * 10) / 10);
      expect(Math.abs(ttft.p50 - Number(ref.e50))).toBeLessThanOrEqual(0.02 * Number(ref.e50) + 0.05);
      expect(Math.abs(ttft.p95 - Number(ref.e95))).toBeLessThanOrEqual(0.02 * Number(ref.e95) + 0.05);
    }
  });

  it('a tenant-scoped report never holds another organization’s tasks', async () => {
    const query = parseUsageQuery({ from: '2031-03-01', to: '2031-04-01', group_by: 'org' }, ADMIN_USAGE_GROUPS);
    const all = await usage.report(query, null);
    const mine = await usage.report(query, orgs[1].id);
    expect(mine.data.map((r) => r.org)).toEqual([orgs[1].name]);
    expect(all.data.map((r) => r.org).sort()).toEqual(orgs.map((o) => o.name).sort());
    const [count] = await db().$queryRaw<
      { n: bigint }[]
    >`SELECT count(*) AS n FROM tasks WHERE org_id = ${orgs[1].id}::uuid`;
    expect(mine.data[0].requests).toBe(Number(count.n));
  });

  it('group_by kind: a row per kind, with the kind, counting the tasks of that kind', async () => {
    const report = await usage.report(
      parseUsageQuery({ group_by: 'kind', from: '2031-03-01', to: '2031-04-01' }, ADMIN_USAGE_GROUPS),
      orgs[0].id,
    );
    const counts = await db().$queryRaw<{ kind: string; n: bigint }[]>`SELECT kind::text AS kind, count(*) AS n
      FROM tasks WHERE org_id = ${orgs[0].id}::uuid AND queued_at >= '2031-03-01' AND queued_at < '2031-04-01'
      GROUP BY kind ORDER BY kind`;
    expect(counts.map((c) => c.kind)).toEqual(['chat', 'embedding']);
    expect(report.data.map((r) => [r.kind, r.requests])).toEqual(counts.map((c) => [c.kind, Number(c.n)]));
  });

  it.each(['model', 'key', 'day', 'hour', 'mode', 'kind', 'status'] as UsageGroup[])(
    'group_by %s: the groups partition the totals',
    async (group) => {
      const query = (g: string) =>
        usage.report(
          parseUsageQuery({ group_by: g, from: '2031-03-01', to: '2031-04-01' }, ADMIN_USAGE_GROUPS),
          orgs[0].id,
        );
      const [total, grouped] = await Promise.all([query(''), query(group)]);
      for (const field of ['requests', 'completed', 'failed', 'prompt_tokens', 'completion_tokens', 'output_bytes']) {
        expect(grouped.data.reduce((sum, r) => sum + (r[field] as number), 0)).toBe(total.data[0][field]);
      }
    },
  );
});
