import { Inject, Injectable } from '@nestjs/common';
import type { OnApplicationShutdown } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { LOGGER, decodeStreamEntry, keys } from '@app/common';
import type { Logger, StreamEntry } from '@app/common';
import { REDIS, STREAMS_REDIS } from '../infra/redis.module';

type Listener = (entry: StreamEntry) => void;

interface Subscription {
  key: string;
  lastId: string;
  listener: Listener;
}

/** Entries per stream per read: enough for a burst of tokens, small enough to keep reads short. */
const READ_COUNT = 512;
/** The longest a read blocks; new subscriptions interrupt it with CLIENT UNBLOCK. */
const BLOCK_MS = 5_000;

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
  subscribe(taskId: string, listener: Listener): () => void {
    const key = keys.taskStream(taskId);
    this.subs.set(key, { key, lastId: '0', listener });
    this.loop ??= this.run();
    this.interrupt();
    return () => {
      this.subs.delete(key);
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
      if (this.subs.size === 0) {
        await new Promise<void>((resolve) => (this.wake = resolve));
        this.wake = null;
        continue;
      }
      try {
        this.clientId ??= await this.conn.client('ID');
        const subs = [...this.subs.values()];
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
            this.deliver(sub, fields);
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
