import { Inject, Injectable } from '@nestjs/common';
import type { OnApplicationShutdown } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { APP_CONFIG, LOGGER, createBlockingRedis, decodeStreamEntry, keys } from '@app/common';
import type { AppConfig, Logger, StreamEntry } from '@app/common';
import { REDIS } from '../redis/redis.module';

type Listener = (entry: StreamEntry) => void;

interface Subscription {
  key: string;
  lastId: string;
  listener: Listener;
}

/** Entries per stream per read: enough for a burst of tokens, small enough to keep reads short. */
const READ_COUNT = 512;
/** Reads follow each other at least this far apart. */
const READ_WINDOW_MS = 2;
/** The longest a read blocks; new subscriptions interrupt it with CLIENT UNBLOCK. */
const BLOCK_MS = 5_000;

/**
 * Reads the event streams of every task this api instance is waiting on, over one blocking Redis
 * connection (XREAD on all of them at once), instead of one connection per open request.
 */
@Injectable()
export class TaskStreamReader implements OnApplicationShutdown {
  private readonly subs = new Map<string, Subscription>();
  private readonly conn: Redis;
  private clientId: number | null = null;
  private running = true;
  private reading = false;
  private wake: (() => void) | null = null;
  private loop: Promise<void> | null = null;
  private lastReadAt = -Infinity;
  private interruptTimer: NodeJS.Timeout | null = null;

  constructor(
    @Inject(REDIS) private readonly redis: Redis,
    @Inject(APP_CONFIG) config: AppConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {
    this.conn = createBlockingRedis(config.REDIS_URL, { connectionName: 'switchyard-api-streams' });
    this.conn.on('error', () => undefined);
    this.conn.on('ready', () => {
      this.clientId = null;
    });
  }

  /** Calls `listener` with each entry of the task's stream, in order, from the beginning. */
  subscribe(taskId: string, listener: Listener): () => void {
    const key = keys.taskStream(taskId);
    this.subs.set(key, { key, lastId: '0', listener });
    this.loop ??= this.run();
    this.scheduleInterrupt();
    return () => {
      this.subs.delete(key);
    };
  }

  /**
   * The blocking read must start over to include a new stream. Nothing can be in that stream for a
   * few milliseconds (a dispatcher has to fetch, claim and assign the job first), so the new
   * subscriptions of READ_WINDOW_MS share one interruption instead of one each.
   */
  private scheduleInterrupt(): void {
    if (this.wake) {
      this.wake();
      return;
    }
    if (this.interruptTimer) {
      return;
    }
    this.interruptTimer = setTimeout(() => {
      this.interruptTimer = null;
      if (this.reading && this.clientId !== null) {
        void this.redis.client('UNBLOCK', this.clientId).catch(() => undefined);
      }
    }, READ_WINDOW_MS);
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
        // Under load, read at most every READ_WINDOW_MS: one read then brings the entries of many
        // tasks (a read is a socket write, which costs far more than its bytes). When the streams
        // are quiet the read blocks at once, so a lone token is not delayed.
        const wait = this.lastReadAt + READ_WINDOW_MS - performance.now();
        if (wait > 0) {
          await new Promise((r) => setTimeout(r, wait));
        }
        this.lastReadAt = performance.now();
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
    if (this.interruptTimer) {
      clearTimeout(this.interruptTimer);
    }
    this.wake?.();
    this.conn.disconnect();
    await this.loop?.catch(() => undefined);
  }
}
