import { Inject, Injectable } from '@nestjs/common';
import { Coalescer, LOGGER, PgService } from '@app/common';
import type { FinishReason, Logger, Usage } from '@app/common';

export type ClaimResult = { claimed: true; attempts: number } | { claimed: false; status: string | null };

/**
 * How long a task's move to `streaming` waits to be written. Most short answers complete within it,
 * and their completion records the first token itself: one statement instead of two. Those that
 * stream longer are moved together, one statement per window.
 */
const STREAMING_LINGER_MS = 50;
/** Claims and completions of all tasks go to Postgres together at most this often under load. */
const BATCH_WINDOW_MS = 2;

interface Completion {
  taskId: string;
  finishReason: FinishReason;
  usage: Usage | null;
  outputSha256: string;
  firstTokenAt: Date | null;
}

/**
 * The dispatcher's writes to task rows. Every transition is a conditional update on the status it
 * expects, so that a cancel, a timeout or another dispatcher racing with us cannot be overwritten.
 */
@Injectable()
export class TaskRecordsService {
  /** First-token times waiting to be written, by task id. */
  private readonly streaming = new Map<string, Date>();
  private streamingTimer: NodeJS.Timeout | null = null;

  private readonly claims = new Coalescer(
    (batch: { taskId: string; deviceId: string }[]) => this.claimBatch(batch),
    BATCH_WINDOW_MS,
  );
  private readonly completions = new Coalescer((batch: Completion[]) => this.completeBatch(batch), BATCH_WINDOW_MS);

  constructor(
    private readonly db: PgService,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  /**
   * Claims a task for a device: from `queued`, or from `assigned` with no output yet (its previous
   * device or dispatcher is gone and the job came back through the stalled check).
   */
  async claim(taskId: string, deviceId: string): Promise<ClaimResult> {
    const attempts = await this.claims.submit({ taskId, deviceId });
    if (attempts !== null) {
      return { claimed: true, attempts };
    }
    const { rows } = await this.db.sql<{ status: string }>(`SELECT status FROM tasks WHERE id = $1`, [taskId]);
    return { claimed: false, status: rows[0]?.status ?? null };
  }

  /** The claims of one window in one statement: the new attempt count of each claimed task. */
  private async claimBatch(batch: { taskId: string; deviceId: string }[]): Promise<(number | null)[]> {
    // A task appears once per statement (an UPDATE … FROM joins each row once); a repeat, which
    // BullMQ's locks make unexpected, is claimed on its own afterwards.
    const first = new Map<string, number>();
    batch.forEach((c, i) => first.has(c.taskId) || first.set(c.taskId, i));
    const unique = [...first.values()].map((i) => batch[i]);
    const { rows } = await this.db.sql<{ id: string; attempts: number }>(
      `UPDATE tasks t SET status = 'assigned', device_id = v.device_id, assigned_at = now(), attempts = t.attempts + 1
       FROM unnest($1::uuid[], $2::uuid[]) AS v(id, device_id)
       WHERE t.id = v.id AND (t.status = 'queued' OR (t.status = 'assigned' AND t.first_token_at IS NULL))
       RETURNING t.id, t.attempts`,
      [unique.map((c) => c.taskId), unique.map((c) => c.deviceId)],
    );
    const claimed = new Map(rows.map((r) => [r.id, r.attempts]));
    const results: (number | null)[] = [];
    for (const [i, c] of batch.entries()) {
      results.push(first.get(c.taskId) === i ? (claimed.get(c.taskId) ?? null) : (await this.claimBatch([c]))[0]);
    }
    return results;
  }

  /**
   * The first output reached the api: from now on the task can no longer be retried elsewhere
   * (the api also refuses output from a later attempt once it has relayed some). Written within
   * STREAMING_LINGER_MS, together with the other tasks' first tokens of that window, unless the
   * task ends first.
   */
  markStreaming(taskId: string, at: Date): void {
    this.streaming.set(taskId, at);
    this.streamingTimer ??= setTimeout(() => void this.flushStreaming(), STREAMING_LINGER_MS);
  }

  private async flushStreaming(): Promise<void> {
    this.streamingTimer = null;
    if (this.streaming.size === 0) {
      return;
    }
    const ids = [...this.streaming.keys()];
    const ats = [...this.streaming.values()];
    this.streaming.clear();
    await this.db
      .sql(
        `UPDATE tasks t SET status = 'streaming', first_token_at = v.at
         FROM unnest($1::uuid[], $2::timestamptz[]) AS v(id, at)
         WHERE t.id = v.id AND t.status = 'assigned'`,
        [ids, ats],
      )
      .catch((err: unknown) => this.logger.error({ err, tasks: ids.length }, 'could not record first tokens'));
  }

  /** Writes what is waiting now (at shutdown, before the pool closes). */
  async flush(): Promise<void> {
    if (this.streamingTimer) {
      clearTimeout(this.streamingTimer);
    }
    await this.flushStreaming();
  }

  /** Back to the queue after the device dropped before any output. */
  async requeue(taskId: string, deviceId: string): Promise<boolean> {
    const { rowCount } = await this.db.sql(
      `UPDATE tasks SET status = 'queued', device_id = NULL, assigned_at = NULL
       WHERE id = $1 AND device_id = $2 AND status = 'assigned' AND first_token_at IS NULL`,
      [taskId, deviceId],
    );
    return rowCount === 1;
  }

  /** Records a finished task; false when something else (a timeout, a cancel) ended it first. */
  async complete(taskId: string, result: Omit<Completion, 'taskId'>): Promise<boolean> {
    this.streaming.delete(taskId);
    return this.completions.submit({ taskId, ...result });
  }

  /** The completions of one window in one statement: whether each task was completed by it. */
  private async completeBatch(batch: Completion[]): Promise<boolean[]> {
    const { rows } = await this.db.sql<{ id: string }>(
      `UPDATE tasks t SET status = 'completed', finish_reason = v.finish_reason, prompt_tokens = v.prompt_tokens,
         completion_tokens = v.completion_tokens, output_sha256 = v.output_sha256,
         first_token_at = COALESCE(v.first_token_at, t.first_token_at), finished_at = now()
       FROM unnest($1::uuid[], $2::text[], $3::int[], $4::int[], $5::text[], $6::timestamptz[])
         AS v(id, finish_reason, prompt_tokens, completion_tokens, output_sha256, first_token_at)
       WHERE t.id = v.id AND t.status IN ('assigned', 'streaming')
       RETURNING t.id`,
      [
        batch.map((c) => c.taskId),
        batch.map((c) => c.finishReason),
        batch.map((c) => c.usage?.prompt_tokens ?? null),
        batch.map((c) => c.usage?.completion_tokens ?? null),
        batch.map((c) => c.outputSha256),
        batch.map((c) => c.firstTokenAt),
      ],
    );
    const done = new Set(rows.map((r) => r.id));
    return batch.map((c) => done.has(c.taskId));
  }

  /**
   * A task the client abandoned: the api may have marked it cancelled already; this makes sure it is,
   * and records the SHA-256 of what had been relayed.
   */
  async cancelled(taskId: string, output: { sha256: string; firstTokenAt: Date } | null): Promise<void> {
    this.streaming.delete(taskId);
    // One statement, so that nobody sees the task cancelled without its error code and end time.
    await this.db.sql(
      `UPDATE tasks SET status = 'cancelled',
         error_code = COALESCE(error_code, 'client_disconnected'),
         finished_at = COALESCE(finished_at, now()),
         output_sha256 = COALESCE($2, output_sha256),
         first_token_at = COALESCE(first_token_at, $3)
       WHERE id = $1 AND status IN ('queued', 'assigned', 'streaming', 'cancelled')`,
      [taskId, output?.sha256 ?? null, output?.firstTokenAt ?? null],
    );
  }

  /**
   * Ends tasks nobody can end any more because the api instance that held their client died:
   * queued past the queue timeout, or unfinished past the longest a request may last. The api
   * normally ends them itself well before; the margin keeps this from racing it.
   */
  async reapOrphans(queueTimeoutMs: number, maxStreamMs: number, marginMs: number): Promise<number> {
    const queued = await this.db.sql(
      `UPDATE tasks SET status = 'timed_out', error_code = 'queue_timeout', finished_at = now()
       WHERE status = 'queued' AND queued_at < $1`,
      [new Date(Date.now() - queueTimeoutMs - marginMs)],
    );
    const running = await this.db.sql(
      `UPDATE tasks SET status = 'timed_out', error_code = 'stream_timeout', finished_at = now()
       WHERE status IN ('assigned', 'streaming') AND queued_at < $1`,
      [new Date(Date.now() - maxStreamMs - marginMs)],
    );
    return (queued.rowCount ?? 0) + (running.rowCount ?? 0);
  }

  /** Ends a task that is not yet terminal with an error status; returns whether this call ended it. */
  async end(
    taskId: string,
    status: 'failed' | 'cancelled' | 'timed_out',
    errorCode: string,
    output: { sha256: string; firstTokenAt: Date } | null = null,
  ): Promise<boolean> {
    // With output, also the first-token time: its own write (markStreaming) may not have happened.
    this.streaming.delete(taskId);
    const { rowCount } = await this.db.sql(
      `UPDATE tasks SET status = $2, error_code = $3, finished_at = now(),
         output_sha256 = COALESCE($4, output_sha256), first_token_at = COALESCE($5, first_token_at)
       WHERE id = $1 AND status IN ('queued', 'assigned', 'streaming')`,
      [taskId, status, errorCode, output?.sha256 ?? null, output?.firstTokenAt ?? null],
    );
    return rowCount === 1;
  }
}
