import { ENDED_STATUSES, LIVE_STATUSES, sqlStatusList } from '../tasks/task-statuses';
import type { UsagePlan, Span } from './usage-plan';
import type { UsageGroup } from './usage-query';

/** The key id the rollups store for tasks without one (a primary key cannot hold null). */
export const NO_KEY = '00000000-0000-0000-0000-000000000000';
const IN_FLIGHT = sqlStatusList(LIVE_STATUSES);
/** The percentiles reported, as percentile_cont takes them. */
const PERCENTILES = { p50: 0.5, p95: 0.95 } as const;

/** Each group as an expression on the unified columns of every source (t: a period's start, or queued_at). */
const GROUP_SQL: Record<UsageGroup, { counts: string; latency: string }> = {
  model: { counts: 'model_id', latency: 'model_id' },
  key: { counts: 'api_key_id', latency: 'api_key_id' },
  day: { counts: `date_trunc('day', t, 'UTC')`, latency: `date_trunc('day', t, 'UTC')` },
  hour: { counts: `date_trunc('hour', t, 'UTC')`, latency: `date_trunc('hour', t, 'UTC')` },
  mode: { counts: 'mode', latency: 'mode' },
  kind: { counts: 'kind', latency: 'kind' },
  // Latency histograms hold completed tasks only: their percentiles belong to the `completed` row.
  status: { counts: 'status', latency: `'completed'::task_status` },
  org: { counts: 'org_id', latency: 'org_id' },
};

/** Collects positional parameters. */
class Params {
  readonly values: unknown[] = [];
  add(value: unknown): string {
    this.values.push(value);
    return `$${this.values.length}`;
  }
}

const RAW_COUNTS = `SELECT org_id, queued_at AS t, model_id, coalesce(api_key_id, '${NO_KEY}'::uuid) AS api_key_id, mode,
  kind, status, 1 AS requests, coalesce(prompt_tokens, 0)::bigint AS prompt_tokens,
  coalesce(completion_tokens, 0)::bigint AS completion_tokens, coalesce(output_bytes, 0) AS output_bytes FROM tasks`;
const rollupCounts = (table: string, time: string) => `SELECT org_id, ${time} AS t, model_id, api_key_id, mode, kind,
  status, requests, prompt_tokens, completion_tokens, output_bytes FROM ${table}`;
const RAW_LATENCY = `SELECT org_id, queued_at AS t, model_id, coalesce(api_key_id, '${NO_KEY}'::uuid) AS api_key_id, mode,
  kind, m.metric, usage_bucket(m.ms) AS bucket, 1 AS tasks FROM tasks,
  LATERAL (VALUES (0::smallint, usage_ms(queued_at, first_token_at)), (1::smallint, usage_ms(queued_at, finished_at))) m (metric, ms)`;
const rollupLatency = (table: string, time: string) =>
  `SELECT org_id, ${time} AS t, model_id, api_key_id, mode, kind, metric, bucket, tasks FROM ${table}`;
/** The organization-wide histograms: enough when no group splits by model, key, mode or kind, and far fewer rows. */
const ORG_LATENCY = `SELECT org_id, start AS t, NULL::text AS model_id, NULL::uuid AS api_key_id, NULL::task_mode AS mode,
  NULL::task_kind AS kind, metric, bucket, tasks FROM usage_latency_org`;
const SPLITS_ORG: readonly UsageGroup[] = ['model', 'key', 'mode', 'kind'];

/**
 * The SQL of a usage report: counts and sums from the rollups at the periods the plan says (+ their
 * unfolded deltas, + the tasks table for partial hours and tasks in flight), latency percentiles from
 * the merged bucket histograms of the same sources. A percentile is computed the way
 * percentile_cont is (linear between the two nearest ranks), over each task's bucket value, so that the
 * answer is the same whichever mix of sources the plan reads. Every part is scoped to `orgId` unless null
 * (the admin's view of all organizations).
 */
export function usageSql(plan: UsagePlan, groups: UsageGroup[], orgId: string | null) {
  const p = new Params();
  const org = orgId === null ? 'true' : `org_id = ${p.add(orgId)}::uuid`;
  const span = (column: string, [from, to]: Span) => `${column} >= ${p.add(from)} AND ${column} < ${p.add(to)}`;

  const counts: string[] = [];
  const latency: string[] = [];
  for (const s of plan.raw) {
    counts.push(`${RAW_COUNTS} WHERE ${org} AND ${span('queued_at', s)}`);
    latency.push(
      `${RAW_LATENCY} WHERE ${org} AND ${span('queued_at', s)} AND status = 'completed' AND m.ms IS NOT NULL`,
    );
  }
  const wholeOrg = !groups.some((g) => SPLITS_ORG.includes(g));
  for (const { period, span: s } of plan.rollup) {
    const where = `WHERE period = '${period}' AND ${org} AND ${span('start', s)}`;
    counts.push(`${rollupCounts('usage_counts', 'start')} ${where}`);
    latency.push(`${wholeOrg ? ORG_LATENCY : rollupLatency('usage_latency', 'start')} ${where}`);
  }
  if (plan.rolled) {
    // Deltas not folded yet are by hour, whatever period the rollups are read at.
    counts.push(`${rollupCounts('usage_count_deltas', 'hour')} WHERE ${org} AND ${span('hour', plan.rolled)}`);
    latency.push(`${rollupLatency('usage_latency_deltas', 'hour')} WHERE ${org} AND ${span('hour', plan.rolled)}`);
    // Tasks in flight are in no rollup yet (only ended tasks are); there are few of them at any time.
    counts.push(`${RAW_COUNTS} WHERE status IN ${IN_FLIGHT} AND ${org} AND ${span('queued_at', plan.rolled)}`);
  }
  if (counts.length === 0) {
    // An empty range: one branch that yields nothing keeps the statement's shape.
    counts.push(`${RAW_COUNTS} WHERE ${org} AND false`);
    latency.push(`${RAW_LATENCY} WHERE ${org} AND false`);
  }

  // No group: one internal constant group, never shown.
  const g = groups.length ? groups : null;
  const cols = g ? g.map((_, i) => `g${i}`) : ['g0'];
  const countExprs = g ? g.map((name, i) => `${GROUP_SQL[name].counts} AS g${i}`) : ['0 AS g0'];
  const latencyExprs = g ? g.map((name, i) => `${GROUP_SQL[name].latency} AS g${i}`) : ['0 AS g0'];
  const ordinals = cols.map((_, i) => String(i + 1)).join(', ');
  const list = cols.join(', ');
  const statusSum = (status: string) => `coalesce(sum(requests) FILTER (WHERE status = '${status}'), 0)::bigint`;
  const pct = Object.entries(PERCENTILES).map(([name, q]) => ({ name, pos: `${q}::float8 * (total - 1)` }));

  const text = `
WITH c AS (${counts.join('\n  UNION ALL ')}),
counts AS (
  SELECT ${countExprs.join(', ')}, sum(requests)::bigint AS requests,
    ${ENDED_STATUSES.map((status) => `${statusSum(status)} AS ${status}`).join(', ')},
    sum(prompt_tokens)::bigint AS prompt_tokens, sum(completion_tokens)::bigint AS completion_tokens,
    sum(output_bytes)::bigint AS output_bytes
  FROM c GROUP BY ${ordinals} HAVING sum(requests) <> 0),
l AS (${latency.join('\n  UNION ALL ')}),
h AS (SELECT ${latencyExprs.join(', ')}, metric, bucket, sum(tasks)::bigint AS n
  FROM l GROUP BY ${ordinals}, metric, bucket HAVING sum(tasks) <> 0),
cum AS (SELECT h.*, (sum(n) OVER (PARTITION BY ${list}, metric ORDER BY bucket))::float8 AS upto,
  (sum(n) OVER (PARTITION BY ${list}, metric))::float8 AS total FROM h),
pos AS (SELECT ${list}, metric, total, ${pct
    .map(
      ({ name, pos }) =>
        `min(bucket) FILTER (WHERE upto > floor(${pos})) AS ${name}_lo, min(bucket) FILTER (WHERE upto > ceil(${pos})) AS ${name}_hi`,
    )
    .join(', ')}
  FROM cum GROUP BY ${list}, metric, total),
pct AS (SELECT ${list}, metric, ${pct
    .map(
      ({ name, pos }) =>
        `usage_bucket_value(${name}_lo) + (usage_bucket_value(${name}_hi) - usage_bucket_value(${name}_lo)) * (${pos} - floor(${pos})) AS ${name}`,
    )
    .join(', ')} FROM pos),
lat AS (SELECT ${list}, ${['ttft', 'duration']
    .flatMap((metric, m) => pct.map(({ name }) => `max(${name}) FILTER (WHERE metric = ${m}) AS ${metric}_${name}`))
    .join(', ')} FROM pct GROUP BY ${list})
SELECT counts.*, lat.ttft_p50, lat.ttft_p95, lat.duration_p50, lat.duration_p95${
    groups.includes('key') ? `, k.prefix AS key_prefix, k.label AS key_label` : ''
  }${groups.includes('org') ? `, o.name AS org_name` : ''}
FROM counts LEFT JOIN lat ON ${cols.map((col) => `counts.${col} IS NOT DISTINCT FROM lat.${col}`).join(' AND ')}${
    groups.includes('key') ? ` LEFT JOIN api_keys k ON k.id = counts.g${groups.indexOf('key')}` : ''
  }${groups.includes('org') ? ` LEFT JOIN organizations o ON o.id = counts.g${groups.indexOf('org')}` : ''}
ORDER BY ${cols.map((col, i) => (g?.[i] === 'org' ? 'o.name' : `counts.${col}`)).join(', ')}`;
  return { text, values: p.values };
}
