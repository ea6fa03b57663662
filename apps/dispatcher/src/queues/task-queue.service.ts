import { Inject, Injectable } from '@nestjs/common';
import type { OnModuleDestroy } from '@nestjs/common';
import { Worker } from 'bullmq';
import type { Job } from 'bullmq';
import type { Redis } from 'ioredis';
import { APP_CONFIG, JOB_LOCK_MS, QUEUE_PREFIX, keys } from '@app/common';
import type { AppConfig, ChatJobData } from '@app/common';
import { BULL_REDIS, REDIS } from '../redis.providers';

/**
 * BullMQ access for the dispatcher: one manually driven Worker per queue that a connected device
 * serves (created on first use; a static @Processor cannot follow dynamic queue names). Jobs are
 * fetched only for an idle device, never prefetched.
 */
@Injectable()
export class TaskQueueService implements OnModuleDestroy {
  private readonly workers = new Map<string, Worker<ChatJobData>>();

  constructor(
    @Inject(BULL_REDIS) private readonly connection: Redis,
    @Inject(REDIS) private readonly redis: Redis,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
  ) {}

  private worker(queue: string): Worker<ChatJobData> {
    let worker = this.workers.get(queue);
    if (!worker) {
      worker = new Worker<ChatJobData>(queue, null, {
        connection: this.connection,
        prefix: QUEUE_PREFIX,
        autorun: false,
        lockDuration: JOB_LOCK_MS,
        // A job whose dispatcher died comes back once per attempt; the dispatcher decides when to give up.
        maxStalledCount: this.config.MAX_ATTEMPTS,
        stalledInterval: JOB_LOCK_MS / 2,
      });
      worker.on('error', () => undefined);
      // Manual workers run the stalled-job check only when asked to.
      void worker.startStalledCheckTimer().catch(() => undefined);
      this.workers.set(queue, worker);
    }
    return worker;
  }

  /** Takes the next waiting job of a queue for `token`, without blocking. */
  async fetch(queue: string, token: string): Promise<Job<ChatJobData> | undefined> {
    return this.worker(queue).getNextJob(token, { block: false });
  }

  /** Waiting jobs per queue this dispatcher has a worker for. */
  async depths(): Promise<[string, number][]> {
    return Promise.all(
      [...this.workers.keys()].map(async (queue): Promise<[string, number]> => {
        const waiting = await this.redis.llen(`${QUEUE_PREFIX}:${queue}:wait`).catch(() => 0);
        return [queue, waiting];
      }),
    );
  }

  /** Tells every dispatcher that a queue has a job again (after a requeue). */
  async nudge(queue: string): Promise<void> {
    await this.redis.publish(keys.jobsChannel, queue);
  }

  async onModuleDestroy(): Promise<void> {
    await Promise.all([...this.workers.values()].map((w) => w.close(true).catch(() => undefined)));
  }
}
