import { Inject, Injectable } from '@nestjs/common';
import type { OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { APP_CONFIG, LOGGER, TaskRepository, REDIS, taskLifetimeMs, Announcements } from '@app/common';
import type { AppConfig, Logger, RedisClient } from '@app/common';
import { JobSource } from '../queues/job-source.service';

/** How often tasks past their deadline are looked for, and how many at a time. */
const REAP_INTERVAL_MS = 30_000;
const REAP_BATCH = 200;

/**
 * Ends tasks nobody can end any more: past their deadline (the queue timeout plus the longest a
 * request may last, plus a margin), because the api instance that held their client died with them.
 * The api normally ends them itself well before. And runs the lines' stalled-job checks, so that no
 * job is left in a line's active list once its lock lapsed.
 */
@Injectable()
export class ReaperService implements OnModuleInit, OnModuleDestroy {
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly tasks: TaskRepository,
    private readonly jobs: JobSource,
    @Inject(REDIS) private readonly redis: RedisClient,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  onModuleInit(): void {
    this.timer = setInterval(() => {
      this.reap().catch((err: unknown) => this.logger.warn({ err: (err as Error).message }, 'orphan check failed'));
    }, REAP_INTERVAL_MS);
    this.timer.unref();
  }

  onModuleDestroy(): void {
    if (this.timer) {
      clearInterval(this.timer);
    }
  }

  async reap(now = Date.now()): Promise<number> {
    let ended = 0;
    for (const task of await this.tasks.overdue(now, REAP_BATCH)) {
      const queued = task.status === 'queued';
      const result = await this.tasks.end(
        task.id,
        { status: 'timed_out', errorCode: queued ? 'queue_timeout' : 'stream_timeout' },
        'any',
      );
      if (!result.ok) {
        continue;
      }
      ended++;
      if (queued) {
        await (await this.jobs.find(task.line, task.id))?.remove();
      } else {
        // A dispatcher may still hold it: its device is told to stop.
        await Announcements.cancel(this.redis, task.id);
      }
    }
    ended += await this.reapLost(now);
    if (ended > 0) {
      this.logger.warn({ count: ended }, 'ended orphaned tasks (their api instance was gone)');
    }
    const recovered = await this.jobs.recoverStalled();
    if (recovered > 0) {
      // Back in their lines: a task that still waits is claimed again, an ended one is dropped at its claim.
      this.logger.warn({ count: recovered }, 'jobs whose lock lapsed went back to their lines');
    }
    return ended;
  }

  /**
   * Records past their deadline (reckoned from queued_at) whose task Redis no longer knows (it lost
   * them in a restart without persistence): they end in Postgres (see TaskRepository.end).
   */
  private async reapLost(now: number): Promise<number> {
    let ended = 0;
    for (const row of await this.tasks.lostRecords(now - taskLifetimeMs(this.config), REAP_BATCH)) {
      const code = row.status === 'queued' ? 'queue_timeout' : 'stream_timeout';
      ended += (await this.tasks.end(row.id, { status: 'timed_out', errorCode: code }, 'any')).ok ? 1 : 0;
    }
    return ended;
  }
}
