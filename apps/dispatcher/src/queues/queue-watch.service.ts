import { Inject, Injectable } from '@nestjs/common';
import type { OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { LOGGER, keys, SUB_REDIS } from '@app/common';
import type { Logger } from '@app/common';

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
    @Inject(SUB_REDIS) private readonly sub: Redis,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  listen(listener: QueueEvents): void {
    this.listener = listener;
  }

  async onModuleInit(): Promise<void> {
    this.sub.on('message', (channel: string, message: string) => {
      if (!this.listener) {
        return;
      }
      if (channel === keys.jobsChannel) {
        this.listener.onJobWaiting(message);
      } else if (channel === keys.cancelChannel) {
        this.listener.onCancel(message);
      }
    });
    this.sub.on('error', (err: Error) => this.logger.warn({ err: err.message }, 'subscriber connection error'));
    await this.sub.subscribe(keys.jobsChannel, keys.cancelChannel);
  }

  onModuleDestroy(): void {
    this.listener = null;
  }
}
