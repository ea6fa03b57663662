import type { RedisClient } from '../redis/redis';
import type { Logger } from '../logging/logger';
import { RECORD_WRITERS } from '../redis/keys';
import { KeySpace } from '../redis/key-space';
import { parseSnapshot } from './task-state';
import type { TaskSnapshot } from './task-state';

/** Records per read: one statement writes them all. */
const BATCH = 500;
/**
 * The longest a read waits for records: also how long stopping may take (the read in progress ends,
 * and what it brought is written, rather than left to another writer).
 */
const BLOCK_MS = 500;
/**
 * A read that brought less than a batch waits this long for more before writing: a task's records
 * (create, claim, first output, end) come milliseconds apart, and the writer then writes the latest of
 * them once instead of each, in a statement that runs after the request's first token rather than on
 * its way (Postgres, the writer and the request share the machine's cores). It is also as far as
 * Postgres lags behind Redis, at most; `GET /v1/tasks/{address}` reads Redis first.
 */
export const LINGER_MS = 250;
/** How long the read after the linger may take (a round trip is a fraction of a millisecond). */
const MORE_WITHIN_MS = 100;
/** Records read by a writer that has not acknowledged them for this long are taken over (it died). */
const ABANDONED_MS = 5_000;
/** After a failed write, how long a writer reads nothing: longer than others need to take its records over. */
const PAUSE_AFTER_FAILURE_MS = 2 * ABANDONED_MS;

/** Something that runs SQL on Postgres (PgService, or a pg Pool). */
export interface SqlRunner {
  sql<R extends object = Record<string, unknown>>(
    text: string,
    values?: unknown[],
  ): Promise<{ rowCount: number | null; rows: R[] }>;
}

/**
 * A batch of task states. What a task is created with (address, org, key, model, mode, api, kind, stream, trace
 * id) is never updated.
 */
const UPSERT = `
INSERT INTO tasks (id, address, org_id, api_key_id, model_id, mode, api, stream, status, device_id, finish_reason,
  error_code, prompt_tokens, completion_tokens, queued_at, assigned_at, first_token_at, finished_at, attempts,
  output_sha256, record_version, output_bytes, usage_source, model_digest, resumes, segments, kind, trace_id)
SELECT * FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::uuid[], $5::text[], $6::task_mode[], $7::task_api[],
  $8::boolean[], $9::task_status[], $10::uuid[], $11::text[], $12::text[], $13::int[], $14::int[], $15::timestamptz[],
  $16::timestamptz[], $17::timestamptz[], $18::timestamptz[], $19::int[], $20::text[], $21::int[], $22::bigint[],
  $23::text[], $24::text[], $25::int[], $26::jsonb[], $27::task_kind[], $28::text[])
ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, device_id = EXCLUDED.device_id,
  finish_reason = EXCLUDED.finish_reason, error_code = EXCLUDED.error_code, prompt_tokens = EXCLUDED.prompt_tokens,
  completion_tokens = EXCLUDED.completion_tokens, assigned_at = EXCLUDED.assigned_at,
  first_token_at = EXCLUDED.first_token_at, finished_at = EXCLUDED.finished_at, attempts = EXCLUDED.attempts,
  output_sha256 = EXCLUDED.output_sha256, record_version = EXCLUDED.record_version,
  output_bytes = EXCLUDED.output_bytes, usage_source = EXCLUDED.usage_source, model_digest = EXCLUDED.model_digest,
  resumes = EXCLUDED.resumes, segments = COALESCE(EXCLUDED.segments, tasks.segments)
WHERE tasks.record_version < EXCLUDED.record_version`;

function columns(rows: TaskSnapshot[]): unknown[] {
  const col = <T>(f: (r: TaskSnapshot) => T) => rows.map(f);
  return [
    col((r) => r.id),
    col((r) => r.address),
    col((r) => r.orgId),
    col((r) => r.apiKeyId),
    col((r) => r.modelId),
    col((r) => r.mode),
    col((r) => r.api),
    col((r) => r.stream),
    col((r) => r.status),
    col((r) => r.deviceId),
    col((r) => r.finishReason),
    col((r) => r.errorCode),
    col((r) => r.promptTokens),
    col((r) => r.completionTokens),
    col((r) => r.queuedAt),
    col((r) => r.assignedAt),
    col((r) => r.firstTokenAt),
    col((r) => r.finishedAt),
    col((r) => r.attempts),
    col((r) => r.outputSha256),
    col((r) => r.version),
    col((r) => r.outputBytes),
    col((r) => r.usageSource),
    col((r) => r.modelDigest),
    col((r) => r.resumes ?? 0),
    col((r) => r.segments),
    col((r) => r.kind),
    col((r) => r.traceId ?? null),
  ];
}

/** The fields of a stream entry as a hash. */
function toHash(fields: string[]): Record<string, string> {
  const h: Record<string, string> = {};
  for (let i = 0; i + 1 < fields.length; i += 2) {
    h[fields[i]] = fields[i + 1];
  }
  return h;
}

/**
 * Writes task records to Postgres behind the tasks' transitions: reads a records stream (a partition's:
 * there is one on a single server, one per partition on a cluster) as one consumer of its `writers`
 * group (every api and dispatcher runs one per partition), keeps the latest state of each
 * task in a batch, and upserts them in one statement that never replaces a newer version. A record is
 * acknowledged and deleted only once written; those a writer read and never acknowledged (it was
 * killed) are taken over by another after ABANDONED_MS. So a record survives a kill -9 of any process.
 */
export class TaskRecordWriter {
  private running = false;
  private loop: Promise<void> | null = null;
  private lastClaim = 0;
  /** The records stream it reads. */
  private readonly records: string;

  constructor(
    /** A connection of the writer's own: reads block on it. */
    private readonly redis: RedisClient,
    private readonly db: SqlRunner,
    private readonly logger: Logger,
    private readonly consumer: string,
    /** The partition whose records stream it reads (the only one on a single server). */
    partition = 0,
  ) {
    this.records = KeySpace.of(redis).records(partition);
  }

  start(): void {
    this.running = true;
    this.loop ??= this.run();
  }

  /** Stops once the read in progress and its batch are written (or given up: then another writer takes them). */
  async stop(): Promise<void> {
    this.running = false;
    await this.loop;
    this.redis.disconnect();
  }

  private async ensureGroup(): Promise<void> {
    try {
      await this.redis.xgroup('CREATE', this.records, RECORD_WRITERS, '0', 'MKSTREAM');
    } catch (err) {
      if (!String((err as Error).message).includes('BUSYGROUP')) {
        throw err;
      }
    }
  }

  private async run(): Promise<void> {
    let ready = false;
    while (this.running) {
      try {
        if (!ready) {
          await this.ensureGroup();
          ready = true;
        }
        let entries = await this.next();
        if (entries.length > 0 && entries.length < BATCH && this.running) {
          await this.pause(LINGER_MS);
          entries = entries.concat(await this.more(BATCH - entries.length));
        }
        if (entries.length > 0) {
          await this.write(entries);
        }
      } catch (err) {
        if (!this.running) {
          break;
        }
        ready = false;
        // Leave what this writer holds to the others: it reads and claims nothing until they could have
        // taken its records over (idle ABANDONED_MS), so that one instance that cannot reach Postgres
        // (or reaches the wrong one) delays a batch by seconds, not every record it would go on taking.
        this.logger.warn(
          { err: (err as Error).message },
          'task records could not be written; leaving them to the other writers for now',
        );
        await this.pause(PAUSE_AFTER_FAILURE_MS);
      }
    }
  }

  /** Waits, or less when the writer is stopped. */
  private pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const started = Date.now();
      const tick = () => {
        const left = ms - (Date.now() - started);
        return !this.running || left <= 0 ? resolve() : setTimeout(tick, Math.min(100, left));
      };
      tick();
    });
  }

  /**
   * New records that are already there, without waiting; none if Redis does not answer at once. What
   * was read before is then written all the same, now: held back through an outage, it would come after
   * an ending written to Postgres directly meanwhile (TaskRepository.end), which needs its row. Records
   * that this read delivers late stay pending for this writer and are taken over after ABANDONED_MS.
   */
  private async more(count: number): Promise<[string, string[]][]> {
    if (this.redis.status !== 'ready') {
      return [];
    }
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), MORE_WITHIN_MS)));
    const read = this.redis
      .xreadgroup('GROUP', RECORD_WRITERS, this.consumer, 'COUNT', count, 'STREAMS', this.records, '>')
      .catch(() => null) as Promise<[string, [string, string[]][]][] | null>;
    try {
      const result = await Promise.race([read, late]);
      return result?.[0]?.[1] ?? [];
    } finally {
      clearTimeout(timer);
    }
  }

  /** Records abandoned by a dead writer first (now and then), else new ones. */
  private async next(): Promise<[string, string[]][]> {
    if (Date.now() - this.lastClaim > ABANDONED_MS / 3) {
      this.lastClaim = Date.now();
      const claimed = (await this.redis.xautoclaim(
        this.records,
        RECORD_WRITERS,
        this.consumer,
        ABANDONED_MS,
        '0',
        'COUNT',
        BATCH,
      )) as [string, [string, string[]][]];
      const taken = claimed[1].filter((e) => e && e[1]);
      if (taken.length > 0) {
        return taken;
      }
    }
    const result = (await this.redis.xreadgroup(
      'GROUP',
      RECORD_WRITERS,
      this.consumer,
      'COUNT',
      BATCH,
      'BLOCK',
      BLOCK_MS,
      'STREAMS',
      this.records,
      '>',
    )) as [string, [string, string[]][]][] | null;
    return result?.[0]?.[1] ?? [];
  }

  /** Writes the latest state of each task of the batch, then acknowledges and deletes the entries. */
  private async write(entries: [string, string[]][]): Promise<void> {
    const latest = new Map<string, TaskSnapshot>();
    for (const [, fields] of entries) {
      const snapshot = parseSnapshot(toHash(fields));
      if (snapshot && (latest.get(snapshot.id)?.version ?? -1) < snapshot.version) {
        latest.set(snapshot.id, snapshot);
      }
    }
    const rows = [...latest.values()];
    if (rows.length > 0) {
      await this.upsert(rows);
    }
    const ids = entries.map(([id]) => id);
    await this.redis
      .multi()
      .xack(this.records, RECORD_WRITERS, ...ids)
      .xdel(this.records, ...ids)
      .exec();
  }

  /**
   * One statement for the batch. Should it fail, each row is tried alone so that one bad row (its
   * organization deleted meanwhile) does not hold back the others; a row Postgres refuses for good is
   * logged and dropped, and a failure of Postgres itself is thrown (the batch is read again).
   */
  private async upsert(rows: TaskSnapshot[]): Promise<void> {
    try {
      await this.db.sql(UPSERT, columns(rows));
      return;
    } catch (err) {
      if (rows.length === 1 && !isDataError(err)) {
        throw err;
      }
    }
    for (const row of rows) {
      try {
        await this.db.sql(UPSERT, columns([row]));
      } catch (err) {
        if (!isDataError(err)) {
          throw err;
        }
        this.logger.error(
          { err: (err as Error).message, task: row.address, status: row.status },
          'a task record was refused by Postgres and dropped',
        );
      }
    }
  }
}

/** A refusal of the row itself (a constraint, a bad value), as opposed to Postgres being unreachable. */
function isDataError(err: unknown): boolean {
  const code = (err as { code?: unknown }).code;
  // Class 22 (data exception) and 23 (integrity constraint violation).
  return typeof code === 'string' && (code.startsWith('22') || code.startsWith('23'));
}
