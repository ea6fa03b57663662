import { Inject, Injectable } from '@nestjs/common';
import { APP_CONFIG, DISCONNECTED_MID_ANSWER, LOGGER, REDIS, Announcements } from '@app/common';
import type { AppConfig, ErrorCode, FinishReason, Logger, TransitionResult, Usage, RedisClient } from '@app/common';
import { UsageAudit } from '../devices/usage-audit.service';
import { DispatcherMetrics } from '../infra/dispatcher-metrics.service';
import { JobSource } from '../queues/job-source.service';
import type { Closing } from '../relay/task-writer';
import { TaskWriters } from '../relay/task-writers.service';
import type { Assignment } from './assignment';
import { AssignmentBook } from './assignment-book';

/** How an assignment ends. */
export type Outcome =
  | { kind: 'completed'; finishReasons: FinishReason[]; usage: Usage | null }
  /** The task fails; `stop` tells the device to stop (it is still running it). */
  | { kind: 'failed'; code: ErrorCode; message: string; stop: boolean }
  /** The client is gone (or the api holding it): the device is told to stop. */
  | { kind: 'cancelled' }
  /** The device is gone or refused it: another device takes the task unless output reached the client. */
  | { kind: 'dropped'; reason: string }
  /** The task was ended elsewhere (a timeout, a cancel): nothing is left to record. */
  | { kind: 'abandoned' };

/**
 * The one way an assignment ends, whatever ended it. In one order, each step once: the device is
 * freed (and told to stop when it still works on it), the task's transition is written with the
 * event its client gets, the job is finished or put back, the outcome is counted. Failures of a step
 * are logged here, nowhere else.
 */
@Injectable()
export class Finalizer {
  constructor(
    private readonly book: AssignmentBook,
    private readonly writers: TaskWriters,
    private readonly jobs: JobSource,
    private readonly metrics: DispatcherMetrics,
    private readonly audit: UsageAudit,
    @Inject(REDIS) private readonly redis: RedisClient,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  end(a: Assignment, outcome: Outcome): Promise<void> {
    if (a.ended) {
      return Promise.resolve();
    }
    a.ended = true;
    if ((outcome.kind === 'failed' && outcome.stop) || outcome.kind === 'cancelled') {
      a.session.send('task:cancel', { task_address: a.address });
    }
    this.book.release(a);
    return this.writers.track(this.record(a, outcome));
  }

  /** A dropped assignment becomes a requeue or a failure; the rest as they are. */
  private decide(a: Assignment, outcome: Outcome): Outcome | { kind: 'requeue'; reason: string } {
    if (outcome.kind !== 'dropped') {
      return outcome;
    }
    if (a.relayed) {
      return { kind: 'failed', code: 'device_disconnected', message: DISCONNECTED_MID_ANSWER, stop: false };
    }
    if (a.attempt > 0 && a.attempt < this.config.MAX_ATTEMPTS) {
      return { kind: 'requeue', reason: outcome.reason };
    }
    const message = `No device could complete the request (${a.attempt} attempt(s)).`;
    return { kind: 'failed', code: 'device_disconnected', message, stop: false };
  }

  private closing(a: Assignment, outcome: Outcome | { kind: 'requeue'; reason: string }): Closing {
    switch (outcome.kind) {
      case 'completed': {
        this.audit.completed(
          a.session,
          outcome.usage?.completion_tokens ?? null,
          a.tracker.bytes,
          outcome.finishReasons.length,
        );
        const { usage, clamped } = a.tracker.bound(outcome.usage);
        if (clamped) {
          this.metrics.clampedUsage.inc();
          this.logger.warn({ task: a.address, reported: outcome.usage, recorded: usage }, 'device usage clamped');
        }
        return {
          kind: 'end',
          ending: {
            status: 'completed',
            finishReason: outcome.finishReasons[0],
            promptTokens: usage?.prompt_tokens ?? null,
            completionTokens: usage?.completion_tokens ?? null,
            outputSha256: a.tracker.sha256,
            outputBytes: a.tracker.bytes,
            usageSource: usage ? 'device' : null,
          },
          event: { type: 'done', finish_reasons: outcome.finishReasons, usage },
        };
      }
      case 'failed':
        return {
          kind: 'end',
          ending: { status: 'failed', errorCode: outcome.code, ...this.delivered(a) },
          event: { type: 'error', code: outcome.code, message: outcome.message },
        };
      case 'cancelled':
        return {
          kind: 'end',
          ending: {
            status: 'cancelled',
            errorCode: 'client_disconnected',
            ...this.delivered(a),
          },
        };
      case 'requeue':
        return { kind: 'requeue', event: { type: 'requeued', reason: outcome.reason } };
      case 'dropped':
      case 'abandoned':
        return { kind: 'abandon' };
    }
  }

  /**
   * What a task that ends early delivered: its hash, and the tokens and bytes Switchyard counted as it
   * relayed them, so that usage bills what the client received.
   */
  private delivered(a: Assignment) {
    return a.relayed
      ? {
          outputSha256: a.tracker.sha256,
          completionTokens: a.tracker.deltas,
          outputBytes: a.tracker.bytes,
          usageSource: 'relay' as const,
        }
      : {};
  }

  private async record(a: Assignment, given: Outcome): Promise<void> {
    // The attempt (and whether there is one at all) is known once the claim is settled.
    await a.claimed;
    const outcome = this.decide(a, given);
    let result: TransitionResult | null = null;
    if (a.writer) {
      result = await a.writer.close(this.closing(a, outcome));
    }
    const label = outcome.kind === 'failed' ? outcome.code : outcome.kind;
    try {
      if (outcome.kind === 'requeue' && result?.ok) {
        await this.jobs.putBack(a.job, a.token);
        await Announcements.jobWaiting(this.redis, a.line);
        this.metrics.assignments.inc({ result: 'requeued' });
        return;
      }
      await this.jobs.finish(a.job, a.token, outcome.kind === 'completed' ? null : label);
    } catch (err) {
      // The job keeps its lock until it expires (MAX_STREAM_MS); its task has ended all the same.
      this.logger.warn({ err: (err as Error).message, task: a.address, outcome: label }, 'could not move the job');
    }
    // A requeue whose job could not be put back is still a requeue, not an ending of the task.
    if (result?.ok && outcome.kind !== 'requeue') {
      this.metrics.tasks.inc({ outcome: outcome.kind === 'completed' ? 'completed' : label });
    }
    this.logger.info(
      { deviceId: a.session.id, task: a.address, requestId: a.job.data.requestId, outcome: label, attempt: a.attempt },
      'task assignment ended',
    );
  }
}
