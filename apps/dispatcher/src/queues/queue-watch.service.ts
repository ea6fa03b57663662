import { Inject, Injectable } from '@nestjs/common';
import type { OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { LOGGER, SUB_REDIS, Announcements } from '@app/common';
import type { Logger, RedisClient } from '@app/common';

export interface QueueEvents {
  /** A line has a new job (or one back from a requeue). */
  onJobWaiting(line: string): void;
  /** A client went away: stop its task if a device here has it. */
  onCancel(taskId: string): void;
}

/**
 * What the apis announce on Pub/Sub: a job waiting on a line, a task to cancel. Pub/Sub does not
 * persist, so the dispatch module also sweeps the backlogged queues now and then.
 */
@Injectable()
export class QueueWatch implements OnModuleInit, OnModuleDestroy {
  private listener: QueueEvents | null = null;

  constructor(
    @Inject(SUB_REDIS) private readonly sub: RedisClient,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  listen(listener: QueueEvents): void {
    this.listener = listener;
  }

  async onModuleInit(): Promise<void> {
    this.sub.on('error', (err: Error) => this.logger.warn({ err: err.message }, 'subscriber connection error'));
    await Announcements.listen(this.sub, {
      jobWaiting: (line) => this.listener?.onJobWaiting(line),
      cancel: (taskId) => this.listener?.onCancel(taskId),
    });
  }

  onModuleDestroy(): void {
    this.listener = null;
  }
}
