import { Inject, Injectable } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { APP_CONFIG, Coalescer, LOGGER, TASK_STREAM_TTL_S, encodeStreamEntry, keys, retrying } from '@app/common';
import type { AppConfig, Logger, TaskEvent } from '@app/common';
import { REDIS } from '../redis.providers';

/**
 * Under load, the entries of all tasks go to Redis together at most this often (see Coalescer);
 * a lone token is not delayed.
 */
const WRITE_WINDOW_MS = 2;

interface PendingEntry {
  key: string;
  fields: string[];
  setExpiry: boolean;
}

/** Most events in one stream entry (a burst of tokens from a fast device). */
const MAX_BATCH = 256;
/** The first wait before writing again while Redis is unreachable (then doubling, see retrying). */
const RETRY_FIRST_MS = 50;

/**
 * The events of one task from this dispatcher, in order. Each event gets the next sequence number
 * of its attempt; the api uses them to drop a repeat and to notice a gap (an entry lost with Redis).
 */
export class TaskWriter {
  /** Events not yet known to be in Redis; the first has sequence number `pendingSeq`. */
  private pending: TaskEvent[] = [];
  private pendingSeq = 0;
  private writing = false;
  private closed = false;
  /** Whether the stream's expiry is known to be set (it is set again after a failed write). */
  private expirySet = false;
  private idle: Promise<void> = Promise.resolve();
  private settle: (() => void) | null = null;

  constructor(
    private readonly owner: TaskStreamService,
    readonly taskId: string,
    /** The assignment the events belong to; null for a terminal error written by another dispatcher. */
    readonly attempt: number | null,
    /** Called if the events could not be written for longer than the api waits for them. */
    private readonly onLost: (() => void) | null,
  ) {}

  /** Queues an event. A terminal event (done, error, requeued) closes the writer once written. */
  push(event: TaskEvent): void {
    if (this.closed) {
      return;
    }
    if (event.type === 'done' || event.type === 'error' || event.type === 'requeued') {
      this.closed = true;
    }
    this.pending.push(event);
    if (!this.writing) {
      this.writing = true;
      this.idle = new Promise((resolve) => (this.settle = resolve));
      this.owner.busy.add(this);
      // Started on the next microtask, so that the events of one tick go out as one entry.
      queueMicrotask(() => void this.drain());
    }
  }

  /** Resolves when everything pushed so far is written (or given up). */
  flushed(): Promise<void> {
    return this.idle;
  }

  /**
   * Writes what is pending, one entry at a time: whatever piles up while a write is in flight goes
   * out together in the next one. A failed write is retried, in order, until it succeeds or the
   * outage lasts longer than `giveUpMs`.
   */
  private async drain(): Promise<void> {
    while (this.pending.length > 0) {
      let written = 0;
      try {
        await retrying(
          async () => {
            // Whatever piled up during a failed try goes out with the retry.
            const batch = this.pending.slice(0, MAX_BATCH);
            const fields = encodeStreamEntry(this.attempt, this.pendingSeq, batch);
            try {
              await this.owner.write(this.taskId, fields, !this.expirySet);
            } catch (err) {
              // Redis may have lost the stream with its expiry: set it again with the retry.
              this.expirySet = false;
              throw err;
            }
            written = batch.length;
          },
          this.owner.giveUpMs,
          RETRY_FIRST_MS,
        );
      } catch (err) {
        this.owner.logger.error(
          { err: (err as Error).message, taskId: this.taskId, events: this.pending.length },
          'task events could not be written to Redis: given up',
        );
        this.pending = [];
        this.closed = true;
        this.onLost?.();
        break;
      }
      this.expirySet = true;
      this.pending.splice(0, written);
      this.pendingSeq += written;
    }
    this.writing = false;
    this.owner.busy.delete(this);
    this.settle?.();
  }
}

/**
 * Writes tasks' events to their Redis Streams, which the api instance holding the client reads. A
 * stream (unlike Pub/Sub) keeps every event in order until it is read, and expires on its own.
 */
@Injectable()
export class TaskStreamService {
  private readonly entries = new Coalescer<PendingEntry, void>((batch) => this.writeBatch(batch), WRITE_WINDOW_MS);
  /** Writers with events on their way (shutdown waits for them). */
  readonly busy = new Set<TaskWriter>();
  readonly giveUpMs: number;

  constructor(
    @Inject(REDIS) private readonly redis: Redis,
    @Inject(APP_CONFIG) config: AppConfig,
    @Inject(LOGGER) readonly logger: Logger,
  ) {
    // Past this the api has given up on a silent task anyway (and told its client).
    this.giveUpMs = config.TASK_IDLE_TIMEOUT_MS;
  }

  /** A writer for one attempt of a task. */
  writer(taskId: string, attempt: number | null, onLost: (() => void) | null = null): TaskWriter {
    return new TaskWriter(this, taskId, attempt, onLost);
  }

  /** A single terminal event from outside an attempt (the attempt's dispatcher is gone). */
  append(taskId: string, event: TaskEvent): Promise<void> {
    const writer = this.writer(taskId, null);
    writer.push(event);
    return writer.flushed();
  }

  /** @internal One stream entry; the expiry is (re)set with the first entry and after an outage. */
  write(taskId: string, fields: string[], setExpiry: boolean): Promise<void> {
    return this.entries.submit({ key: keys.taskStream(taskId), fields, setExpiry });
  }

  /** The entries of every task written within one window, in one pipeline (one socket write). */
  private async writeBatch(batch: PendingEntry[]): Promise<(void | Error)[]> {
    const pipeline = this.redis.pipeline();
    for (const { key, fields, setExpiry } of batch) {
      pipeline.xadd(key, '*', ...fields);
      if (setExpiry) {
        pipeline.expire(key, TASK_STREAM_TTL_S);
      }
    }
    const replies = await pipeline.exec();
    if (!replies) {
      throw new Error('pipeline aborted');
    }
    let at = 0;
    return batch.map(({ setExpiry }) => {
      const replyErrors = replies.slice(at, (at += setExpiry ? 2 : 1)).map(([err]) => err);
      return replyErrors.find((err) => err) ?? undefined;
    });
  }

  /** Waits (at most `ms`) for every writer to finish: shutdown must not drop the last events. */
  async flushAll(ms: number): Promise<void> {
    const all = Promise.all([...this.busy].map((w) => w.flushed()));
    await Promise.race([all, new Promise((r) => setTimeout(r, ms).unref())]);
  }
}
