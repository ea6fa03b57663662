import { Inject, Injectable } from '@nestjs/common';
import type { OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { setTimeout as delay } from 'node:timers/promises';
import { APP_CONFIG, LOGGER, PrismaService, RETENTION_BATCH, deleteExpiredTasks, retentionCutoff } from '@app/common';
import type { AppConfig, Logger } from '@app/common';
import { PeriodicJob } from '../common/periodic-job';

/** How often an api instance looks for task records past retention. */
const RETENTION_INTERVAL_MS = 60_000;
/** The first look, after the api started: soon, so that a restart does not hold retention back a minute. */
const FIRST_PASS_MS = 5_000;
/** The shortest pause between two batches. */
const MIN_PAUSE_MS = 20;
/** One instance deletes at a time: a session-level advisory lock (an arbitrary key of this job's). */
const RETENTION_LOCK = 0x5359_5245;

/**
 * Deletes task records older than TASK_RETENTION_DAYS (docs/operations.md, "Retention"), in batches of
 * RETENTION_BATCH, oldest first, at most TASK_RETENTION_ROWS_PER_SECOND; the usage rollups keep their
 * counts. Every api instance tries
 * every RETENTION_INTERVAL_MS; one that finds the lock taken leaves it to the one holding it.
 */
@Injectable()
export class RetentionService implements OnModuleInit, OnModuleDestroy {
  private readonly passes = new PeriodicJob(() => this.pass(), {
    everyMs: RETENTION_INTERVAL_MS,
    firstAfterMs: FIRST_PASS_MS,
  });

  constructor(
    private readonly prisma: PrismaService,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  onModuleInit(): void {
    if (this.config.TASK_RETENTION_DAYS === 0) {
      return;
    }
    this.passes.start();
  }

  /** Stops between two batches, after the one in progress. */
  async onModuleDestroy(): Promise<void> {
    await this.passes.stop();
  }

  /** One pass (after the one in progress): every record past retention, batch by batch, unless another instance is at it. */
  prune(): Promise<void> {
    return this.passes.run();
  }

  private async pass(): Promise<void> {
    const client = await this.prisma.pool.connect().catch(() => null);
    if (!client) {
      return;
    }
    try {
      const { rows } = await client.query<{ locked: boolean }>('SELECT pg_try_advisory_lock($1) AS locked', [
        RETENTION_LOCK,
      ]);
      if (!rows[0].locked) {
        return;
      }
      try {
        const cutoff = retentionCutoff(Date.now(), this.config.TASK_RETENTION_DAYS);
        let deleted = 0;
        let from: Date | null = null;
        while (!this.passes.stopping) {
          const started = Date.now();
          const batch = await deleteExpiredTasks(this.prisma.pool, cutoff, from);
          deleted += batch.deleted;
          from = batch.last;
          if (batch.deleted < RETENTION_BATCH) {
            break;
          }
          // At most TASK_RETENTION_ROWS_PER_SECOND: what the deletes cost the request path and the record
          // writer follows the WAL they write each second (docs/benchmarks.md, "Retention").
          const due = (batch.deleted / this.config.TASK_RETENTION_ROWS_PER_SECOND) * 1000;
          await delay(Math.max(MIN_PAUSE_MS, due - (Date.now() - started)));
        }
        if (deleted > 0) {
          this.logger.info({ deleted, before: cutoff.toISOString() }, 'deleted task records past retention');
        }
      } finally {
        await client.query('SELECT pg_advisory_unlock($1)', [RETENTION_LOCK]);
      }
    } catch (error) {
      this.logger.warn({ err: error }, 'could not delete task records past retention; will retry');
    } finally {
      client.release();
    }
  }
}
