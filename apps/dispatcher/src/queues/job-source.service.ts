import { Inject, Injectable } from '@nestjs/common';
import type { OnModuleDestroy } from '@nestjs/common';
import type { Job } from 'bullmq';
import { randomUUID } from 'node:crypto';
import {
  APP_CONFIG,
  FairShare,
  LOGGER,
  LineQueues,
  STALLED_INTERVAL_MS,
  KeySpace,
  scanKeys,
  keys,
  LINES_REDIS,
  REDIS,
  Announcements,
} from '@app/common';
import type { AppConfig, JobData, Logger, RedisClient } from '@app/common';

export type TaskJob = Job<JobData>;

/** Picks that came back empty (another dispatcher took the job first) before giving up for now. */
const MAX_EMPTY_PICKS = 3;

/**
 * Where jobs come from and go back to: BullMQ lines, all on the dispatcher's one lines connection
 * (see LineQueue and LINES_REDIS), taken in fair-share order (see FairShare, on the command
 * connection). A job's lock, held by its token, is the claim;
 * it lasts longer than any task may (MAX_STREAM_MS), so it is never renewed: a dead dispatcher's jobs
 * are moved by the survivors with the tokens it recorded (see TakeoverService).
 */
@Injectable()
export class JobSource implements OnModuleDestroy {
  private readonly lines: LineQueues;
  readonly fair: FairShare;
  private readonly sweeper = randomUUID();

  constructor(
    @Inject(REDIS) private readonly redis: RedisClient,
    @Inject(LINES_REDIS) lines: RedisClient,
    @Inject(APP_CONFIG) config: AppConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {
    this.lines = new LineQueues(lines, config.MAX_STREAM_MS + 60_000, (err) =>
      this.logger.warn({ err: err.message }, 'queue connection error'),
    );
    this.fair = new FairShare(redis);
  }

  /**
   * Takes the job just announced on `line` (a device was idle): no pick, the line's turn is charged
   * (not awaited), and `charged` hears whether the line's queue has jobs waiting still.
   */
  async takeFrom(line: string, token: string, charged?: (backlog: boolean) => void): Promise<TaskJob | undefined> {
    const job = await this.lines.get(line).take(token);
    if (job) {
      this.fair.charge(line).then(
        (backlog) => charged?.(backlog),
        (err: unknown) => this.warn(err, 'fair-share charge failed'),
      );
    }
    return job;
  }

  /** Takes the next job of a queue, from the line whose turn it is. */
  async takeNext(queue: string, token: string): Promise<TaskJob | undefined> {
    for (let i = 0; i < MAX_EMPTY_PICKS; i++) {
      const line = await this.fair.pick(queue);
      if (!line) {
        return undefined;
      }
      const job = await this.lines.get(line).take(token);
      if (job) {
        return job;
      }
    }
    return undefined;
  }

  /** Back to the head of its line (no output reached a client): the next device of the queue takes it. */
  async putBack(job: TaskJob, token: string): Promise<void> {
    await job.moveToWait(token);
    await this.fair.refund(job.queueName);
  }

  /** The job is over (its task ended): removed from Redis with its request text. */
  async finish(job: TaskJob, token: string, failed: string | null): Promise<void> {
    if (failed) {
      job.discard();
      await job.moveToFailed(new Error(failed), token, false);
    } else {
      await job.moveToCompleted('done', token, false);
    }
  }

  /** A job by its line and id (a dead dispatcher's, to move with its recorded token). */
  find(line: string, jobId: string): Promise<TaskJob | undefined> {
    return this.lines.get(line).getJob(jobId);
  }

  /**
   * Runs the stalled check on every line with active jobs (see LineQueue.recoverStalled); lines that
   * got jobs back regain their turn and the dispatchers are told. Returns how many jobs came back.
   */
  async recoverStalled(): Promise<number> {
    // One dispatcher of all sweeps per interval: the scan reads the whole keyspace.
    const turn = await this.redis.set(keys.stalledSweep, this.sweeper, 'PX', STALLED_INTERVAL_MS - 1_000, 'NX');
    if (turn === null) {
      return 0;
    }
    let moved = 0;
    const scan = KeySpace.of(this.redis).lineActiveScan();
    for await (const found of scanKeys(this.redis, scan.match)) {
      for (const key of found) {
        const line = scan.lineOf(key);
        const ids = await this.lines.get(line).recoverStalled();
        if (ids.length > 0) {
          moved += ids.length;
          await this.fair.refund(line);
          await Announcements.jobWaiting(this.redis, line);
        }
      }
    }
    return moved;
  }

  /** Queues that have waiting jobs, for the sweep. */
  backlogged(): Promise<string[]> {
    return this.fair.backlogged();
  }

  private warn(err: unknown, what: string): void {
    this.logger.warn({ err: (err as Error).message }, what);
  }

  async onModuleDestroy(): Promise<void> {
    await this.lines.close();
  }
}
