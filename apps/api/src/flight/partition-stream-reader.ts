import { decodeStreamEntry } from '@app/common';
import type { Logger, RedisClient, StreamEntry } from '@app/common';

export type Listener = (entry: StreamEntry) => void;

/** A task's stream as one flight reads it. */
export interface StreamSubscription {
  /** Stops reading the stream until resume: what the device sends meanwhile waits in Redis. */
  pause(): void;
  resume(): void;
  close(): void;
}

interface Subscription {
  key: string;
  lastId: string;
  listener: Listener;
  /** Not read while its reader's client is behind (see pause). */
  paused: boolean;
  /** Bytes read since the stream was last trimmed. */
  untrimmed: number;
}

/** Entries per stream per read: enough for a burst of tokens, small enough to keep reads short. */
const READ_COUNT = 512;
/** The longest a read blocks; new subscriptions interrupt it. */
const BLOCK_MS = 5_000;
/**
 * A stream's entries already read are trimmed once they add up to this: a long answer does not stay
 * in Redis whole until its end, and a short one (most) costs no command for it (its stream is
 * deleted when its request ends).
 */
const TRIM_BYTES = 64 * 1024;
/** A wake mark's key lives this long after its last mark (the api that owns it may be killed). */
const WAKE_TTL_MS = 3_600_000;

/**
 * Reads the event streams of one partition's tasks that this api instance is waiting on, over one
 * blocking connection (XREAD on all of them at once), instead of one connection per open request. A
 * new subscription interrupts the read in progress at once (the subscriptions of one turn of the event
 * loop share one interruption); nothing waits on a timer.
 */
export class PartitionStreamReader {
  private readonly subs = new Map<string, Subscription>();
  private clientId: number | null = null;
  private running = true;
  private reading = false;
  private wake: (() => void) | null = null;
  private loop: Promise<void> | null = null;
  private interruptQueued = false;
  /** The last wake mark read (a cluster's interruption). */
  private wakeId = '0';

  constructor(
    /** A blocking connection of this reader's own. */
    private readonly conn: RedisClient,
    /** The command connection: interruptions and trims. */
    private readonly commands: RedisClient,
    /**
     * How a blocking read is cut short to take in a new stream. Null on a single server: CLIENT UNBLOCK
     * of the reading connection. On a cluster, where a command is routed by its key and CLIENT UNBLOCK
     * could reach another node: the key of a stream of the partition's own, which the read includes and
     * which a mark added to it answers at once.
     */
    private readonly wakeKey: string | null,
    private readonly logger: Logger,
  ) {
    this.conn.on('error', (err: Error) => this.logger.warn({ err: err.message }, 'task stream connection error'));
    this.conn.on('ready', () => {
      this.clientId = null;
    });
  }

  /** Calls `listener` with each entry of the stream at `key`, in order, from the beginning. */
  subscribe(key: string, listener: Listener): StreamSubscription {
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
      if (!this.reading) {
        return;
      }
      let sent: Promise<unknown> | undefined;
      if (this.wakeKey) {
        sent = Promise.all([
          this.commands.xadd(this.wakeKey, 'MAXLEN', 1, '*', 'w', '1'),
          this.commands.pexpire(this.wakeKey, WAKE_TTL_MS),
        ]);
      } else if (this.clientId !== null) {
        sent = this.commands.client('UNBLOCK', this.clientId);
      }
      sent?.catch((err: unknown) =>
        // The read ends on its own within BLOCK_MS; the new stream is read then.
        this.logger.warn({ err: (err as Error).message }, 'could not interrupt the task stream read'),
      );
    });
  }

  private async run(): Promise<void> {
    const marks = this.wakeKey;
    while (this.running) {
      const subs = [...this.subs.values()].filter((s) => !s.paused);
      if (subs.length === 0) {
        await new Promise<void>((resolve) => (this.wake = resolve));
        this.wake = null;
        continue;
      }
      try {
        if (!marks) {
          this.clientId ??= await this.conn.client('ID');
        }
        const keys = subs.map((s) => s.key);
        const ids = subs.map((s) => s.lastId);
        this.reading = true;
        const result = await this.conn.xread(
          'COUNT',
          READ_COUNT,
          'BLOCK',
          BLOCK_MS,
          'STREAMS',
          ...(marks ? [...keys, marks] : keys),
          ...(marks ? [...ids, this.wakeId] : ids),
        );
        this.reading = false;
        for (const [key, entries] of result ?? []) {
          if (key === marks) {
            this.wakeId = entries[entries.length - 1]?.[0] ?? this.wakeId;
            continue;
          }
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
    this.commands.xtrim(sub.key, 'MINID', sub.lastId).catch((err: unknown) =>
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

  async stop(): Promise<void> {
    this.running = false;
    this.wake?.();
    this.conn.disconnect();
    await this.loop;
    if (this.wakeKey) {
      await this.commands.del(this.wakeKey).catch(() => undefined);
    }
  }
}
