import { Inject, Injectable } from '@nestjs/common';
import {
  APP_CONFIG,
  DISCONNECTED_MID_ANSWER,
  LOGGER,
  REDIS,
  Announcements,
  KeySpace,
  TaskRepository,
  decodePresenceMember,
  decodeStreamEntry,
  encodeStreamEntry,
  relayedOutput,
} from '@app/common';
import type { AppConfig, Continuation, Feature, Logger, RedisClient } from '@app/common';
import { DispatcherMetrics } from '../infra/dispatcher-metrics.service';
import { JobSource } from './job-source.service';
import type { TaskJob } from './job-source.service';

/**
 * Why a task whose output reached its client lost its device: `device_disconnected`, `device_timeout`
 * (silent for TASK_IDLE_TIMEOUT_MS), `dispatcher_lost`, `dispatcher_shutdown`, or the code of an error
 * another device may not have (its runtime failed, it is shutting down).
 */
export type ResumeCause = string;

/** The device errors another device may not hit: its runtime failed or went away, or the device is stopping. */
export const RESUMABLE_DEVICE_ERRORS: ReadonlySet<string> = new Set([
  'upstream_error',
  'upstream_unreachable',
  'upstream_bad_response',
  'upstream_busy',
  'backend_error',
  'device_shutdown',
]);

const CONTINUE: Feature = 'continue';

/**
 * Resume (docs/architecture.md, "Resume"): a task whose device was lost after output reached the
 * client goes back to the head of its line with that output, for a device that can continue it. The
 * resume transition (TaskRepository.resume) writes the `resumed` event after everything relayed; then
 * this reads the task's stream as the api read it, puts the answer so far into the job (with the
 * `continue` feature among its requirements), and moves the job back. The stream, not a dispatcher's
 * memory, is the answer so far: a survivor taking over a dead dispatcher's task reads the same.
 */
@Injectable()
export class Resumer {
  private readonly keys: KeySpace;

  constructor(
    private readonly tasks: TaskRepository,
    private readonly jobs: JobSource,
    private readonly metrics: DispatcherMetrics,
    @Inject(REDIS) private readonly redis: RedisClient,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {
    this.keys = KeySpace.of(redis);
  }

  /** Whether the job's task may be resumed once more: its api allowed it, and it has resumes left. */
  static mayResume(job: TaskJob, maxResumes: number): boolean {
    const data = job.data;
    return data.kind !== 'embed' && data.resume === true && (data.continued?.resumes ?? 0) < maxResumes;
  }

  /**
   * Whether the job's task may be resumed now: it may (mayResume), and a device that can continue it
   * is online for its model and pool, other than the `lost` one (else the task ends with today's
   * explicit error, at once, rather than wait out its queue timeout). Counted when a task that may be
   * resumed is not.
   */
  async allows(job: TaskJob, cause: ResumeCause, lost: string | null = null): Promise<boolean> {
    if (job.data.kind === 'embed' || job.data.resume !== true) {
      return false;
    }
    if (!Resumer.mayResume(job, this.config.RESUME_MAX_ATTEMPTS)) {
      this.metrics.resumes.inc({ cause, outcome: 'limit' });
      return false;
    }
    const able = await this.deviceElsewhere(job, [...job.data.requires, CONTINUE], lost);
    if (!able) {
      this.metrics.resumes.inc({ cause, outcome: 'no_device' });
    }
    return able;
  }

  /**
   * Whether a device other than `lost` (and those the job avoids) is online for the job's model and
   * pool with every feature in `needs` (one presence read). A task that could go on elsewhere but has
   * no device to go to ends at once with its error, rather than wait out its queue timeout.
   */
  async deviceElsewhere(job: TaskJob, needs: readonly Feature[], lost: string | null): Promise<boolean> {
    const avoided = new Set(job.data.avoid ?? []);
    const members = await this.redis
      .zrangebyscore(this.keys.presence(job.data.pool, job.data.model), Date.now(), '+inf')
      .catch(() => [] as string[]);
    return members.some((m) => {
      const member = decodePresenceMember(m);
      const features = new Set(member.features);
      return member.deviceId !== lost && !avoided.has(member.deviceId) && needs.every((f) => features.has(f));
    });
  }

  /**
   * The task was resumed (its `resume` transition accepted): the answer so far goes into its job and
   * the job to the head of its line, moved with `token`. Whether it is on its way to another device;
   * when it is not (its stream cannot be continued, or the job could not be moved), the task ended
   * here with `device_disconnected`.
   */
  async continueJob(job: TaskJob, token: string, cause: ResumeCause): Promise<boolean> {
    const data = job.data;
    const taskId = data.taskId;
    try {
      if (data.kind === 'embed') {
        throw new Error('an embedding task is never resumed');
      }
      const raw = await this.redis.xrange(this.keys.taskStream(taskId), '-', '+');
      const relayed = relayedOutput(raw.map(([id, fields]) => ({ id, entry: decodeStreamEntry(fields) })));
      if (!relayed.continuable || relayed.text.length === 0) {
        await this.fail(job, token, cause, 'not_continuable');
        return false;
      }
      const continued: Continuation = {
        text: relayed.text,
        tokens: relayed.tokens,
        resumes: (data.continued?.resumes ?? 0) + 1,
        segments: relayed.segments,
      };
      const requires = data.requires.includes(CONTINUE) ? data.requires : [...data.requires, CONTINUE];
      await job.updateData({ ...data, continued, requires });
      await this.jobs.putBack(job, token);
      await Announcements.jobWaiting(this.redis, job.queueName);
      this.metrics.resumes.inc({ cause, outcome: 'resumed' });
      this.logger.warn(
        {
          task: job.data.taskAddress,
          requestId: job.data.requestId,
          cause,
          resumes: continued.resumes,
          tokens: continued.tokens,
        },
        'task resumed: its device was lost mid-answer; the answer goes on on another device',
      );
      return true;
    } catch (err) {
      this.logger.warn({ err: (err as Error).message, task: job.data.taskAddress }, 'could not resume the task');
      await this.fail(job, token, cause, 'failed').catch(() => undefined);
      return false;
    }
  }

  /** A resumed task that cannot go on after all: it ends as it would have without resume. */
  private async fail(job: TaskJob, token: string, cause: ResumeCause, outcome: string): Promise<void> {
    this.metrics.resumes.inc({ cause, outcome });
    await this.endWaiting(job.data.taskId);
    await this.jobs.finish(job, token, 'device_disconnected');
  }

  /**
   * Ends a resumed task that waits (its answer so far cannot be continued, or its job missed the
   * resume) with `device_disconnected`, the error its client would have had without resume.
   */
  async endWaiting(taskId: string): Promise<void> {
    await this.tasks.end(
      taskId,
      { status: 'failed', errorCode: 'device_disconnected' },
      'queued',
      encodeStreamEntry(null, 0, [{ type: 'error', code: 'device_disconnected', message: DISCONNECTED_MID_ANSWER }]),
    );
  }
}
