import { Inject, Injectable } from '@nestjs/common';
import type { OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { LOGGER, PrismaService } from '@app/common';
import type { Logger } from '@app/common';
import { PeriodicJob } from '../common/periodic-job';

/**
 * A key's use is written at most once per this interval by one api instance: `last_used_at` tells
 * an operator which keys are still in use (before revoking or after rotating one), to the minute,
 * not which request came last.
 */
export const KEY_USE_WRITE_INTERVAL_MS = 60_000;
/** How often the uses seen since the last flush are written, in one statement. */
const FLUSH_INTERVAL_MS = 5_000;
/** The longest a shutdown waits for the last flush. */
const SHUTDOWN_FLUSH_MS = 1_000;

/**
 * Records which API keys authenticate requests and writes their `last_used_at` in the background,
 * batched and coarse: `record` is a map lookup on the request path and never waits for Postgres.
 * Several api instances write the same column; the statement never moves it backwards.
 */
@Injectable()
export class KeyUsageService implements OnModuleInit, OnModuleDestroy {
  /** Key id → time of its latest use not written yet. */
  private readonly pending = new Map<string, number>();
  /** Key id → time of the last use this instance wrote (kept for one write interval). */
  private readonly written = new Map<string, number>();
  /** One flush at a time; the last uses are written on the way out, but a shutdown never waits long for it (Postgres may be gone). */
  private readonly flushes = new PeriodicJob(() => this.write(), {
    everyMs: FLUSH_INTERVAL_MS,
    stopWaitMs: SHUTDOWN_FLUSH_MS,
  });

  constructor(
    private readonly prisma: PrismaService,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  onModuleInit(): void {
    this.flushes.start();
  }

  async onModuleDestroy(): Promise<void> {
    await this.flushes.stop({ lastRun: true });
  }

  /** Notes that a key authenticated a request now. Synchronous and cheap: called for every request. */
  record(keyId: string, now = Date.now()): void {
    const last = this.written.get(keyId);
    if (last !== undefined && now - last < KEY_USE_WRITE_INTERVAL_MS) {
      return;
    }
    this.pending.set(keyId, now);
  }

  /** Writes the pending uses (one flush at a time). */
  flush(): Promise<void> {
    return this.flushes.run();
  }

  private async write(): Promise<void> {
    const now = Date.now();
    for (const [id, at] of this.written) {
      if (now - at >= KEY_USE_WRITE_INTERVAL_MS) {
        this.written.delete(id);
      }
    }
    if (this.pending.size === 0) {
      return;
    }
    const batch = [...this.pending];
    this.pending.clear();
    for (const [id, at] of batch) {
      this.written.set(id, at);
    }
    try {
      await this.prisma.sql(
        `UPDATE api_keys AS k SET last_used_at = u.used_at
           FROM unnest($1::uuid[], $2::timestamptz[]) AS u(id, used_at)
          WHERE k.id = u.id AND (k.last_used_at IS NULL OR k.last_used_at < u.used_at)`,
        [batch.map(([id]) => id), batch.map(([, at]) => new Date(at))],
      );
    } catch (error) {
      // Kept for the next flush (a later use of the same key wins): a database outage loses nothing.
      for (const [id, at] of batch) {
        this.written.delete(id);
        if ((this.pending.get(id) ?? 0) < at) {
          this.pending.set(id, at);
        }
      }
      this.logger.warn({ err: error, keys: batch.length }, 'could not write last_used_at of API keys; will retry');
    }
  }
}
