import { Inject, Injectable } from '@nestjs/common';
import type { OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import {
  APP_CONFIG,
  DISCONNECTED_MID_ANSWER,
  LOGGER,
  TaskRepository,
  encodeStreamEntry,
  keys,
  REDIS,
  InstanceService,
  Announcements,
} from '@app/common';
import type { AppConfig, Logger, TaskSnapshot, RedisClient } from '@app/common';
import { DispatcherMetrics } from '../infra/dispatcher-metrics.service';
import { JobSource } from '../queues/job-source.service';
import { Resumer } from '../queues/resumer.service';

/** How often dead dispatchers are looked for (their presence lapses INSTANCE_TTL_MS after they die). */
const CHECK_INTERVAL_MS = 1_000;
/** One survivor takes over a dead dispatcher's tasks; another tries again after this if it died too. */
const TAKEOVER_LOCK_MS = 30_000;

const DISPATCHER_LOST =
  'The dispatcher relaying this answer stopped before the answer was complete; the rest of it was lost.';

/**
 * When a dispatcher dies, the survivors take over its tasks within seconds instead of leaving their
 * clients waiting for locks to expire: a task with no output relayed yet goes back to the head of its
 * line (an attempt used), one whose output reached the client is resumed on another device (see
 * Resumer) or, when it may not be, ends with the explicit `dispatcher_lost` error. The jobs are moved with the tokens the dead dispatcher recorded, so that
 * nothing can bring them back a second time.
 */
@Injectable()
export class TakeoverService implements OnModuleInit, OnModuleDestroy {
  private timer: NodeJS.Timeout | null = null;
  private running = false;

  constructor(
    private readonly tasks: TaskRepository,
    private readonly jobs: JobSource,
    private readonly resumer: Resumer,
    private readonly instance: InstanceService,
    private readonly metrics: DispatcherMetrics,
    @Inject(REDIS) private readonly redis: RedisClient,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  onModuleInit(): void {
    this.timer = setInterval(() => void this.check(), CHECK_INTERVAL_MS);
    this.timer.unref();
  }

  onModuleDestroy(): void {
    if (this.timer) {
      clearInterval(this.timer);
    }
  }

  private async check(): Promise<void> {
    if (this.running) {
      return;
    }
    this.running = true;
    try {
      for (const dead of await this.instance.lapsed()) {
        if (dead === this.instance.id) {
          continue;
        }
        const won = await this.redis.set(keys.takeoverLock(dead), this.instance.id, 'PX', TAKEOVER_LOCK_MS, 'NX');
        if (won) {
          await this.takeOver(dead);
        }
      }
    } catch (err) {
      this.logger.warn({ err: (err as Error).message }, 'takeover check failed; retrying');
    } finally {
      this.running = false;
    }
  }

  private async takeOver(dead: string): Promise<void> {
    const held = await this.tasks.heldBy(dead);
    this.logger.warn({ dispatcher: dead, tasks: held.length }, 'a dispatcher died: taking over its tasks');
    for (const taskId of held) {
      const task = await this.tasks.get(taskId);
      if (task && task.dispatcherId === dead && (task.status === 'assigned' || task.status === 'streaming')) {
        await this.rescue(task);
      }
      await this.tasks.release(dead, taskId);
    }
    await this.instance.forget(dead);
  }

  private async rescue(task: TaskSnapshot): Promise<void> {
    const job = await this.jobs.find(task.line, task.id);
    // A resumed task's attempts that gave output are not counted against MAX_ATTEMPTS.
    const retry = task.status === 'assigned' && task.attempts < this.config.MAX_ATTEMPTS + (task.resumes ?? 0);
    if (retry) {
      const moved = await this.tasks.requeue(
        task.id,
        task.attempts,
        encodeStreamEntry(null, 0, [{ type: 'requeued', reason: 'dispatcher_lost' }]),
      );
      if (moved.ok && job && task.token) {
        await this.jobs.putBack(job, task.token);
        await Announcements.jobWaiting(this.redis, task.line);
      }
      this.metrics.takeovers.inc({ result: 'requeued' });
      return;
    }
    if (task.status === 'streaming' && job && task.token && (await this.resumer.allows(job, 'dispatcher_lost'))) {
      const resumed = await this.tasks.resume(
        task.id,
        task.attempts,
        encodeStreamEntry(null, 0, [{ type: 'resumed', reason: 'dispatcher_lost' }]),
      );
      if (resumed.ok) {
        await this.resumer.continueJob(job, task.token, 'dispatcher_lost');
        this.metrics.takeovers.inc({ result: 'resumed' });
        return;
      }
    }
    const code = task.status === 'streaming' ? 'dispatcher_lost' : 'device_disconnected';
    const message = task.status === 'streaming' ? DISPATCHER_LOST : DISCONNECTED_MID_ANSWER;
    await this.tasks.end(
      task.id,
      { status: 'failed', errorCode: code },
      { attempt: task.attempts },
      encodeStreamEntry(null, 0, [{ type: 'error', code, message }]),
    );
    if (job && task.token) {
      await this.jobs.finish(job, task.token, code);
    }
    this.metrics.takeovers.inc({ result: code });
  }
}
