import { ERROR_STATUSES, sqlStatusList } from '../tasks/task-statuses';
import type { Sql } from './sql';

/** The traffic charts' window: the last hour, by minute. */
const WINDOW_MIN = 60;
/** The latest failures the dashboard lists. */
const FAILURES = 20;
/** The endings the charts count as errors. */
const ERRORS = sqlStatusList(ERROR_STATUSES);

interface BucketRow {
  at: Date;
  requests: string;
  errors: string;
  ttft_p50: number | null;
  ttft_p95: number | null;
  dur_p50: number | null;
  dur_p95: number | null;
}

/**
 * The last hour of traffic, minute by minute, from the task records (indexed by queued_at): requests
 * per second, time to first token and duration percentiles, errors by code; and the latest failures.
 * What the dashboard's Traffic and Tasks views draw.
 */
export class AdminTrafficService {
  constructor(private readonly sql: Sql) {}

  async lastHour() {
    const since = `now() - interval '${WINDOW_MIN} minutes'`;
    const [buckets, codes, failures] = await Promise.all([
      this.sql.query<BucketRow>(
        `SELECT date_trunc('minute', queued_at) AS at, count(*) AS requests,
           count(*) FILTER (WHERE status IN ${ERRORS}) AS errors,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM first_token_at - queued_at) * 1000) AS ttft_p50,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM first_token_at - queued_at) * 1000) AS ttft_p95,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - queued_at) * 1000) AS dur_p50,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - queued_at) * 1000) AS dur_p95
         FROM tasks WHERE queued_at >= ${since} GROUP BY 1 ORDER BY 1`,
      ),
      this.sql.query<{ code: string; n: string }>(
        `SELECT error_code AS code, count(*) AS n FROM tasks
         WHERE queued_at >= ${since} AND error_code IS NOT NULL GROUP BY 1 ORDER BY 2 DESC, 1`,
      ),
      this.sql.query<{
        address: string;
        org: string;
        model_id: string;
        status: string;
        error_code: string | null;
        queued_at: Date;
        finished_at: Date | null;
      }>(
        `SELECT t.address, o.name AS org, t.model_id, t.status, t.error_code, t.queued_at, t.finished_at
         FROM tasks t JOIN organizations o ON o.id = t.org_id
         WHERE t.status IN ${ERRORS} ORDER BY t.queued_at DESC LIMIT ${FAILURES}`,
      ),
    ]);
    const ms = (v: number | null) => (v === null ? null : Math.round(Number(v)));
    return {
      window_minutes: WINDOW_MIN,
      minutes: buckets.map((b) => ({
        at: b.at.toISOString(),
        requests: Number(b.requests),
        requests_per_second: Number(b.requests) / 60,
        errors: Number(b.errors),
        ttft_p50_ms: ms(b.ttft_p50),
        ttft_p95_ms: ms(b.ttft_p95),
        duration_p50_ms: ms(b.dur_p50),
        duration_p95_ms: ms(b.dur_p95),
      })),
      errors_by_code: codes.map((c) => ({ code: c.code, count: Number(c.n) })),
      recent_failures: failures.map((f) => ({
        task_address: f.address,
        org: f.org,
        model: f.model_id,
        status: f.status,
        error_code: f.error_code,
        queued_at: f.queued_at.toISOString(),
        finished_at: f.finished_at ? f.finished_at.toISOString() : null,
      })),
    };
  }
}
