import type { Pool } from 'pg';
import { AppError } from '../errors/app-error';
import { planUsage } from './usage-plan';
import type { UsageGroup, UsageQuery } from './usage-query';
import { NO_KEY, usageSql } from './usage-sql';

/**
 * A bound on one usage query. A year grouped by hour across every organization is the heaviest thing a
 * caller can ask for; past this it is refused (503) rather than left to hold a connection.
 */
const STATEMENT_TIMEOUT_MS = 60_000;
/** Enough for the grouping and the sorts of a month-long query to stay in memory. */
const WORK_MEM = '64MB';

/** One row of a usage report: the group's fields, then the counts, sums and latency percentiles. */
export type UsageRow = Record<string, unknown>;

export interface UsageReport {
  object: 'list';
  from: string;
  to: string;
  group_by: UsageGroup[];
  data: UsageRow[];
}

/** Milliseconds with one decimal: finer than the histograms can tell. */
const ms = (value: unknown) => (value === null || value === undefined ? null : Math.round(Number(value) * 10) / 10);

function groupValue(group: UsageGroup, value: unknown, row: Record<string, unknown>): [string, unknown][] {
  switch (group) {
    case 'day':
      return [['day', (value as Date).toISOString().slice(0, 10)]];
    case 'hour':
      return [['hour', (value as Date).toISOString()]];
    case 'key':
      return value === NO_KEY
        ? [
            ['key', null],
            ['key_prefix', null],
            ['key_label', null],
          ]
        : [
            ['key', value],
            ['key_prefix', row.key_prefix ?? null],
            ['key_label', row.key_label ?? null],
          ];
    case 'org':
      return [['org', row.org_name ?? null]];
    case 'model':
    case 'mode':
    case 'kind':
    case 'status':
      return [[group, value]];
  }
}

/**
 * Usage reports from the tasks table's rollups (see usage-sql.ts and docs/api.md#usage). Takes the
 * organization id as an argument: a tenant's report is always scoped to its org; only the admin passes null.
 */
export class UsageService {
  constructor(private readonly pool: Pick<Pool, 'connect'>) {}

  async report(query: UsageQuery, orgId: string | null, options: { rawOnly?: boolean } = {}): Promise<UsageReport> {
    const finest = query.groupBy.includes('hour') ? 'hour' : query.groupBy.includes('day') ? 'day' : 'month';
    const plan = planUsage(query.from, query.to, finest, options.rawOnly);
    const { text, values } = usageSql(plan, query.groupBy, orgId);
    const rows = await this.run(text, values);
    return {
      object: 'list',
      from: query.from.toISOString(),
      to: query.to.toISOString(),
      group_by: query.groupBy,
      data: rows.map((row) => ({
        ...Object.fromEntries(query.groupBy.flatMap((group, i) => groupValue(group, row[`g${i}`], row))),
        requests: Number(row.requests),
        completed: Number(row.completed),
        failed: Number(row.failed),
        cancelled: Number(row.cancelled),
        timed_out: Number(row.timed_out),
        prompt_tokens: Number(row.prompt_tokens),
        completion_tokens: Number(row.completion_tokens),
        output_bytes: Number(row.output_bytes),
        ttft_ms: { p50: ms(row.ttft_p50), p95: ms(row.ttft_p95) },
        duration_ms: { p50: ms(row.duration_p50), p95: ms(row.duration_p95) },
      })),
    };
  }

  /** One read-only transaction with the query's own limits (SET LOCAL: the pooled connection keeps nothing). */
  private async run(text: string, values: unknown[]): Promise<Record<string, unknown>[]> {
    const client = await this.pool.connect();
    try {
      await client.query('BEGIN READ ONLY');
      await client.query(`SET LOCAL statement_timeout = ${STATEMENT_TIMEOUT_MS}`);
      await client.query(`SET LOCAL work_mem = '${WORK_MEM}'`);
      const result = await client.query<Record<string, unknown>>(text, values);
      await client.query('COMMIT');
      return result.rows;
    } catch (error) {
      // Rollback after an error: the error handled below is the one to report.
      await client.query('ROLLBACK').catch(() => undefined);
      if ((error as { code?: string }).code === '57014') {
        throw new AppError(
          'service_unavailable',
          `The usage query took longer than ${STATEMENT_TIMEOUT_MS / 1000} s. Ask for a shorter range or fewer groups.`,
        );
      }
      throw error;
    } finally {
      client.release();
    }
  }
}
