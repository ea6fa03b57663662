import { Inject, Injectable } from '@nestjs/common';
import type { OnApplicationShutdown } from '@nestjs/common';
import { Job } from 'bullmq';
import {
  CHAT_JOB,
  FairShare,
  LOGGER,
  LineQueues,
  TaskRepository,
  chatJobOptions,
  queueStanding,
  REDIS,
  Announcements,
} from '@app/common';
import type { JobData, Logger, NewTask, QueueStanding, RedisClient } from '@app/common';

/**
 * The api's one way onto the queues. A new task's record, its job (BullMQ's own script), its line's
 * turn in the fair share and the announcement to the dispatchers go to Redis in one write: one
 * round trip, in this order, so that a dispatcher told of the job finds it and its task.
 */
@Injectable()
export class JobQueue implements OnApplicationShutdown {
  private readonly lines: LineQueues;
  private readonly fair: FairShare;
  /** Whether the connection's writes leave in one order (a single server: one socket). */
  private readonly ordered: boolean;

  constructor(
    @Inject(REDIS) private readonly redis: RedisClient,
    private readonly tasks: TaskRepository,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {
    // The api never takes jobs: the lock duration is the dispatchers' business.
    this.lines = new LineQueues(redis, 0, (err) => this.logger.warn({ err: err.message }, 'queue connection error'));
    this.fair = new FairShare(redis);
    this.ordered = !redis.isCluster;
  }

  async enqueue(task: NewTask, data: JobData, weight: number): Promise<void> {
    const queue = this.lines.get(task.line);
    // The lines, the tasks and the fair share all use this one connection (whose writes are coalesced
    // per turn): the four commands below are issued in one turn, so they leave in one write and Redis
    // runs them in this order.
    const client = await queue.client;
    const created = this.tasks.create(task);
    if (!this.ordered) {
      // On a cluster the task's keys and the queue's live on different masters: one write no longer
      // orders them, so the task exists before a dispatcher can find its job.
      await created;
    }
    // addJob issues BullMQ's add script before its first await.
    const added = new Job<JobData>(queue, CHAT_JOB, data, chatJobOptions(task.id), task.id).addJob(client);
    const enqueued = this.fair.enqueue(task.line, weight);
    const published = Announcements.jobWaiting(this.redis, task.line);
    const [creation] = await Promise.all([created, added, enqueued, published]);
    if (!creation.ok) {
      throw new Error(`task ${task.id} exists already`);
    }
  }

  /** Removes a job that still waits (a job a dispatcher holds is locked and stays). */
  async remove(line: string, taskId: string): Promise<void> {
    await this.lines.get(line).remove(taskId);
  }

  /** Tells the dispatchers to stop a task a device may be working on. */
  async cancel(taskId: string): Promise<void> {
    await Announcements.cancel(this.redis, taskId);
  }

  /** Where a waiting task stands in its queue (1 = next) and its estimated wait, or null when it does not wait. */
  standing(line: string, taskId: string): Promise<QueueStanding | null> {
    return queueStanding(this.redis, this.fair, line, taskId);
  }

  async onApplicationShutdown(): Promise<void> {
    await this.lines.close();
  }
}
