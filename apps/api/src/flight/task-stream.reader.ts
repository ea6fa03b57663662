import { Inject, Injectable } from '@nestjs/common';
import type { OnApplicationShutdown } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { LOGGER, decodeStreamEntry, keys, REDIS, STREAMS_REDIS } from '@app/common';
import type { Logger, StreamEntry } from '@app/common';

type Listener = (entry: StreamEntry) => void;

interface Subscription {
  key: string;
  lastId: string;
  listener: Listener;
  /** Not read while its reader's client is behind (see pause). */
  paused: boolean;
  /** Bytes read since the stream was last trimmed. */
  untrimmed: number;
}

/** A task's stream as one flight reads it. */
export interface StreamSubscription {
  /** Stops reading the stream until resume: what the device sends meanwhile waits in Redis. */
  pause(): void;
  resume(): void;
  close(): void;
}

/** Entries per stream per read: enough for a burst of tokens, small enough to keep reads short. */
const READ_COUNT = 512;
/** The longest a read blocks; new subscriptions interrupt it with CLIENT UNBLOCK. */
const BLOCK_MS = 5_000;
/**
 * A stream's entries already read are trimmed once they add up to this: a long answer does not stay
 * in Redis whole until its end, and a short one (most) costs no command for it (its stream is
 * deleted when its request ends).
 */
const TRIM_BYTES = 64 * 1024;

/**
 * Reads the event streams of every task this api instance is waiting on, over one blocking Redis
 * connection (XREAD on all of them at once), instead of one connection per open request. A new
 * subscription interrupts the read in progress at once (the subscriptions of one turn of the event
 * loop share one interruption); nothing waits on a timer.
 */
@Injectable()
export class TaskStreamReader implements OnApplicationShutdown {
  private readonly subs = new Map<string, Subscription>();
  private clientId: number | null = null;
  private running = true;
  private reading = false;
  private wake: (() => void) | null = null;
  private loop: Promise<void> | null = null;
  private interruptQueued = false;

  constructor(
    @Inject(REDIS) private readonly redis: Redis,
    @Inject(STREAMS_REDIS) private readonly conn: Redis,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {
    this.conn.on('error', (err: Error) => this.logger.warn({ err: err.message }, 'task stream connection error'));
    this.conn.on('ready', () => {
      this.clientId = null;
    });
  }

  /** Calls `listener` with each entry of the task's stream, in order, from the beginning. */
  subscribe(taskId: string, listener: Listener): StreamSubscription {
    const key = keys.taskStream(taskId);
    const sub: Subscription = { key, lastId: '0', listener, paused: false, untrimmed: 0 };
    this.subs.set(key, sub);
    this.loop ??= this.run();
    this.interrupt();
    return {
      pause: () => {
        sub.paused = true;
      },
      resume: () => {
        if (sub.paused) {
          sub.paused = false;
          this.interrupt();
        }
      },
      close: () => {
        if (this.subs.get(key) === sub) {
          this.subs.delete(key);
        }
      },
    };
  }

  /** The blocking read must start over to include a new stream. */
  private interrupt(): void {
    if (this.wake) {
      this.wake();
      return;
    }
    if (this.interruptQueued) {
      return;
    }
    this.interruptQueued = true;
    setImmediate(() => {
      this.interruptQueued = false;
      if (this.reading && this.clientId !== null) {
        this.redis.client('UNBLOCK', this.clientId).catch((err: unknown) =>
          // The read ends on its own within BLOCK_MS; the new stream is read then.
          this.logger.warn({ err: (err as Error).message }, 'could not interrupt the task stream read'),
        );
      }
    });
  }

  private async run(): Promise<void> {
    while (this.running) {
      const subs = [...this.subs.values()].filter((s) => !s.paused);
      if (subs.length === 0) {
        await new Promise<void>((resolve) => (this.wake = resolve));
        this.wake = null;
        continue;
      }
      try {
        this.clientId ??= await this.conn.client('ID');
        this.reading = true;
        const result = await this.conn.xread(
          'COUNT',
          READ_COUNT,
          'BLOCK',
          BLOCK_MS,
          'STREAMS',
          ...subs.map((s) => s.key),
          ...subs.map((s) => s.lastId),
        );
        this.reading = false;
        for (const [key, entries] of result ?? []) {
          const sub = this.subs.get(key);
          for (const [id, fields] of entries) {
            if (!sub || this.subs.get(key) !== sub) {
              break;
            }
            sub.lastId = id;
            sub.untrimmed += fields.reduce((n, f) => n + f.length, 0);
            this.deliver(sub, fields);
          }
          if (sub && sub.untrimmed >= TRIM_BYTES) {
            this.trim(sub);
          }
        }
      } catch (err) {
        this.reading = false;
        if (this.running) {
          this.logger.warn({ err: (err as Error).message }, 'task stream read failed; retrying');
          await new Promise((r) => setTimeout(r, 200));
        }
      }
    }
  }

  /** Drops the entries before the last one read (kept: XTRIM MINID keeps its threshold). */
  private trim(sub: Subscription): void {
    sub.untrimmed = 0;
    this.redis.xtrim(sub.key, 'MINID', sub.lastId).catch((err: unknown) =>
      // The stream is deleted when its request ends, or expires.
      this.logger.warn({ err: (err as Error).message, key: sub.key }, 'could not trim a task stream'),
    );
  }

  private deliver(sub: Subscription, fields: string[]): void {
    try {
      sub.listener(decodeStreamEntry(fields));
    } catch (err) {
      this.logger.error({ err, key: sub.key }, 'task event listener failed');
    }
  }

  async onApplicationShutdown(): Promise<void> {
    this.running = false;
    this.wake?.();
    this.conn.disconnect();
    await this.loop;
  }
}
