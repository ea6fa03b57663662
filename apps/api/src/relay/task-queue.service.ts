import { Inject, Injectable } from '@nestjs/common';
import type { OnApplicationShutdown } from '@nestjs/common';
import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { APP_CONFIG, CHAT_JOB, QUEUE_PREFIX, chatJobOptions, createBlockingRedis, keys, queueName } from '@app/common';
import type { AppConfig, ChatJobData } from '@app/common';
import { REDIS } from '../redis/redis.module';

/** The api's one way onto the queues: enqueue a chat job and tell the dispatchers. */
@Injectable()
export class TaskQueueService implements OnApplicationShutdown {
  private readonly queues = new Map<string, Queue<ChatJobData>>();
  private readonly connection: Redis;

  constructor(
    @Inject(REDIS) private readonly redis: Redis,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
  ) {
    this.connection = createBlockingRedis(config.REDIS_URL, { enableOfflineQueue: false });
    this.connection.on('error', () => undefined);
  }

  private queue(name: string): Queue<ChatJobData> {
    let queue = this.queues.get(name);
    if (!queue) {
      queue = new Queue<ChatJobData>(name, { connection: this.connection, prefix: QUEUE_PREFIX });
      queue.on('error', () => undefined);
      this.queues.set(name, queue);
    }
    return queue;
  }

  async enqueue(data: ChatJobData): Promise<void> {
    const name = queueName(data.model, data.pool);
    // Attempts are counted and bounded by the dispatcher (MAX_ATTEMPTS); BullMQ must never give up first.
    await this.queue(name).add(CHAT_JOB, data, chatJobOptions(data.taskId, this.config.MAX_ATTEMPTS + 5));
    await this.redis.publish(keys.jobsChannel, name);
  }

  /** Removes a job that is still waiting; a job a dispatcher holds is locked and stays. */
  async remove(model: string, pool: string, taskId: string): Promise<void> {
    await this.queue(queueName(model, pool))
      .remove(taskId)
      .catch(() => undefined);
  }

  async cancelRunning(taskId: string): Promise<void> {
    await this.redis.publish(keys.cancelChannel, taskId);
  }

  async onApplicationShutdown(): Promise<void> {
    await Promise.all([...this.queues.values()].map((q) => q.close().catch(() => undefined)));
    this.connection.disconnect();
  }
}
