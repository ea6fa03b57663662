import { Inject, Injectable } from '@nestjs/common';
import type { OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { FOLD_MAX_ROWS, LOGGER, PrismaService, foldUsageDeltas } from '@app/common';
import type { Logger } from '@app/common';
import { PeriodicJob } from '../common/periodic-job';

/**
 * How often pending usage deltas are folded into the rollups. Queries read the deltas too, so this
 * bounds how much they read, not how fresh they are; every api instance tries, one folds at a time.
 */
const FOLD_INTERVAL_MS = 10_000;
/** The longest a shutdown waits for a fold in progress. */
const SHUTDOWN_WAIT_MS = 1_000;

/** Folds the usage deltas that the triggers on tasks append (see the usage migration) in the background. */
@Injectable()
export class UsageFoldService implements OnModuleInit, OnModuleDestroy {
  /** A fold in progress is one transaction: left alone, it commits or rolls back by itself; a shutdown waits a second at most. */
  private readonly folds = new PeriodicJob(() => this.foldAll(), {
    everyMs: FOLD_INTERVAL_MS,
    stopWaitMs: SHUTDOWN_WAIT_MS,
  });

  constructor(
    private readonly prisma: PrismaService,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  onModuleInit(): void {
    this.folds.start();
  }

  async onModuleDestroy(): Promise<void> {
    await this.folds.stop();
  }

  /** One fold, after the one in progress. */
  fold(): Promise<void> {
    return this.folds.run();
  }

  /** Folds (more right away while a full batch came back: a backlog after an outage drains quickly). */
  private async foldAll(): Promise<void> {
    try {
      while ((await foldUsageDeltas(this.prisma.pool)) >= FOLD_MAX_ROWS) {
        // keep going
      }
    } catch (error) {
      // The deltas stay where they are and queries still count them; the next run folds them.
      this.logger.warn({ err: error }, 'could not fold usage deltas; will retry');
    }
  }
}
