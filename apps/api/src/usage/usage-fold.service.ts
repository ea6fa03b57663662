import { Inject, Injectable } from '@nestjs/common';
import type { OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { FOLD_MAX_ROWS, LOGGER, PrismaService, foldUsageDeltas } from '@app/common';
import type { Logger } from '@app/common';
import { untilOrAfter } from '../keys/key-usage.service';

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
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> = Promise.resolve();

  constructor(
    private readonly prisma: PrismaService,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  onModuleInit(): void {
    this.timer = setInterval(() => void this.fold(), FOLD_INTERVAL_MS);
    this.timer.unref();
  }

  /** A fold in progress is one transaction: left alone, it commits or rolls back by itself; a shutdown waits a second at most. */
  async onModuleDestroy(): Promise<void> {
    clearInterval(this.timer);
    await untilOrAfter(this.running, SHUTDOWN_WAIT_MS);
  }

  /** One fold (more right away while a full batch came back: a backlog after an outage drains quickly). */
  fold(): Promise<void> {
    this.running = this.running.then(async () => {
      try {
        while ((await foldUsageDeltas(this.prisma.pool)) >= FOLD_MAX_ROWS) {
          // keep going
        }
      } catch (error) {
        // The deltas stay where they are and queries still count them; the next run folds them.
        this.logger.warn({ err: error }, 'could not fold usage deltas; will retry');
      }
    });
    return this.running;
  }
}
