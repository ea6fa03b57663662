import { performance } from 'node:perf_hooks';
import { isDeepStrictEqual } from 'node:util';
import pg from 'pg';
import { ADMIN_USAGE_GROUPS, UsageService, parseUsageQuery } from '@app/common';
import type { Ctx, ScenarioResult, TargetCheck } from '../lib/context';
import { mdTable, num } from '../lib/format';
import { resetDatabase } from '../lib/stack';
import { median } from '../lib/stats';
import { BIG_ORG, loadMonth } from '../usage/load';
import type { UsageDataSpec } from '../usage/load';
import { BATCH, measureWriteCost } from '../usage/writes';

/** The issue's bound: a month of 10 million tasks answers in under a second. */
const LIMIT_MS = 1_000;
const MONTH = { from: '2026-11-01', to: '2026-12-01' };

interface UsageCase {
  name: string;
  /** One of the issue's typical queries (these carry the target). */
  typical: boolean;
  org: string | null;
  params: { from: string; to: string; group_by?: string };
}

const CASES: UsageCase[] = [
  { name: 'one org, month, by model', typical: true, org: BIG_ORG, params: { ...MONTH, group_by: 'model' } },
  { name: 'one org, month, by day', typical: true, org: BIG_ORG, params: { ...MONTH, group_by: 'day' } },
  { name: 'one org, month, by key', typical: true, org: BIG_ORG, params: { ...MONTH, group_by: 'key' } },
  { name: 'all orgs (admin), month, by org', typical: true, org: null, params: { ...MONTH, group_by: 'org' } },
  { name: 'all orgs (admin), month, by model', typical: true, org: null, params: { ...MONTH, group_by: 'model' } },
  { name: 'one org, month, totals', typical: false, org: BIG_ORG, params: { ...MONTH } },
  { name: 'one org, month, by kind', typical: false, org: BIG_ORG, params: { ...MONTH, group_by: 'kind' } },
  {
    name: 'one org, month, by model,key,mode,status',
    typical: false,
    org: BIG_ORG,
    params: { ...MONTH, group_by: 'model,key,mode,status' },
  },
  {
    name: 'one org, Nov 3 10:30 – Nov 27 15:45, by model (partial hours and days)',
    typical: false,
    org: BIG_ORG,
    params: { from: '2026-11-03T10:30:00Z', to: '2026-11-27T15:45:00Z', group_by: 'model' },
  },
  {
    name: 'one org, one day, by hour',
    typical: false,
    org: BIG_ORG,
    params: { from: '2026-11-14', to: '2026-11-15', group_by: 'hour' },
  },
  { name: 'one org, month, by hour', typical: false, org: BIG_ORG, params: { ...MONTH, group_by: 'hour' } },
];

/** The bench's usage database: the bench database's name plus `_usage` (a database of its own, rebuilt each run). */
function usageDatabaseUrl(benchUrl: string): string {
  const url = new URL(benchUrl);
  url.pathname = `${url.pathname}_usage`;
  return url.toString();
}

/**
 * Usage queries over a generated month: 10 million tasks of one organization (plus small ones), with
 * rollups built by usage_rebuild(), then the typical reports timed through UsageService (the code
 * /v1/usage and /admin/usage run), median of several runs after a warm-up. Also: one report computed
 * from the tasks alone (time, and whether it equals the rollups' answer), and what the triggers add to
 * a task writer's batches.
 */
export async function usageScenario(ctx: Ctx): Promise<ScenarioResult> {
  const { opts } = ctx;
  const databaseUrl = usageDatabaseUrl(opts.databaseUrl);
  ctx.log(`usage: preparing ${new URL(databaseUrl).pathname.slice(1)}`);
  await resetDatabase({ databaseUrl, redisUrl: ctx.target.redisUrl });
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 2 });
  try {
    const spec: UsageDataSpec = {
      bigTasks: opts.usageTasks,
      smallOrgs: 20,
      smallTasks: Math.max(1, Math.round(opts.usageTasks / 1000)),
      monthStart: `${MONTH.from}T00:00:00Z`,
      days: 30,
    };
    const phases = await loadMonth(pool, spec, (message) => ctx.log(message));
    ctx.log(
      `usage: loaded (${Object.entries(phases)
        .map(([k, v]) => `${k} ${v.toFixed(0)} s`)
        .join(', ')})`,
    );
    const sizes = await pool.query<{ table: string; rows: string; bytes: string }>(
      `SELECT t AS table, (xpath('/row/n/text()', query_to_xml(format('SELECT count(*) AS n FROM %I', t), false, true, '')))[1]::text AS rows,
              pg_total_relation_size(t)::text AS bytes
         FROM unnest(ARRAY['tasks', 'usage_counts', 'usage_latency', 'usage_latency_org']) t`,
    );
    const usage = new UsageService(pool);
    const run = (c: UsageCase, rawOnly = false) =>
      usage.report(parseUsageQuery(c.params, ADMIN_USAGE_GROUPS), c.org, { rawOnly });
    const timings: { case: UsageCase; ms: number[]; rows: number }[] = [];
    for (const c of CASES) {
      await run(c);
      const ms: number[] = [];
      let rows = 0;
      for (let i = 0; i < opts.usageRuns; i++) {
        const t0 = performance.now();
        rows = (await run(c)).data.length;
        ms.push(performance.now() - t0);
      }
      timings.push({ case: c, ms, rows });
      ctx.log(`usage: ${c.name}: median ${num(median(ms))} ms`);
    }
    ctx.log('usage: the first report again, from the tasks alone (no rollups): one run');
    const t0 = performance.now();
    const raw = await run(CASES[0], true);
    const rawMs = performance.now() - t0;
    const same = isDeepStrictEqual(raw, await run(CASES[0]));
    ctx.log('usage: write cost of the triggers');
    const writes = await measureWriteCost(pool);

    const targets: TargetCheck[] = timings
      .filter((t) => t.case.typical)
      .map((t) => ({
        target: `Usage: ${t.case.name} (${(spec.bigTasks / 1e6).toFixed(1)} M tasks)`,
        goal: '< 1 s',
        measured: `${num(median(t.ms))} ms`,
        pass: median(t.ms) < LIMIT_MS,
      }));
    const table = mdTable(
      ['query', 'rows', 'median (ms)', 'min (ms)', 'max (ms)'],
      timings.map((t) => [
        t.case.name,
        String(t.rows),
        num(median(t.ms)),
        num(Math.min(...t.ms)),
        num(Math.max(...t.ms)),
      ]),
      ['l', 'r', 'r', 'r', 'r'],
    );
    const perTask = (x: { on: number; off: number }) => (((x.on - x.off) / BATCH) * 1000).toFixed(1);
    const notes = [
      `Data: ${spec.bigTasks.toLocaleString('en')} tasks of one organization and ${spec.smallOrgs} × ${spec.smallTasks.toLocaleString('en')} of others in ${MONTH.from.slice(0, 7)} (30 days), generated in Postgres (INSERT … SELECT generate_series, seeded): 6 models used 50/25/12/7/4/2 %, 10 keys (skewed), 30 % direct, 96 % completed, time to first token log-normal around 400 ms, 1–800 completion tokens at 15–40 ms each.`,
      `Loaded without the triggers, then usage_rebuild() (what the migration runs for existing tasks) built the rollups: ${Object.entries(
        phases,
      )
        .map(([k, v]) => `${k} ${v.toFixed(0)} s`)
        .join(
          ', ',
        )}. Of the indexes of tasks, the primary key and the three a usage query reads were re-created after the load; the others and the foreign keys were left out.`,
      `Sizes: ${sizes.rows.map((s) => `${s.table} ${Number(s.rows).toLocaleString('en')} rows, ${(Number(s.bytes) / 2 ** 20).toFixed(0)} MB`).join('; ')}.`,
      `Each query: UsageService.report in process (what /v1/usage and /admin/usage run), one warm-up, then ${opts.usageRuns} runs; median, min, max.`,
      `"${CASES[0].name}" from the tasks table alone (no rollups): ${num(rawMs / 1000, 1)} s; its answer ${same ? 'equals' : 'DIFFERS FROM'} the rollups' answer.`,
      `Trigger cost on a writer's batch of ${BATCH} tasks (median of 15, triggers on / off): insert as queued ${num(writes.insertQueued.on)} / ${num(writes.insertQueued.off)} ms (${perTask(writes.insertQueued)} µs per task), update to completed ${num(writes.updateCompleted.on)} / ${num(writes.updateCompleted.off)} ms (${perTask(writes.updateCompleted)} µs per task). Folding the deltas of those ${writes.fold.tasks.toLocaleString('en')} completed tasks (${writes.fold.rows.toLocaleString('en')} delta rows, at hour, day and month) took ${num(writes.fold.ms)} ms (${num((writes.fold.ms / writes.fold.tasks) * 1000)} µs per task), in the api's background.`,
    ];
    return {
      name: 'usage',
      title: 'Usage queries',
      table,
      notes,
      targets,
      data: {
        spec,
        phases,
        sizes: sizes.rows,
        timings: timings.map((t) => ({
          name: t.case.name,
          rows: t.rows,
          ms: t.ms.map((m) => Math.round(m * 10) / 10),
        })),
        rawOnly: { ms: Math.round(rawMs), equal: same },
        writes,
      },
    };
  } finally {
    await pool.end();
  }
}
