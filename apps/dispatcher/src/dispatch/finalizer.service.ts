import { Inject, Injectable } from '@nestjs/common';
import { APP_CONFIG, DISCONNECTED_MID_ANSWER, LOGGER, REDIS, Announcements, traceIdOf } from '@app/common';
import type {
  AppConfig,
  Continuation,
  ErrorCode,
  FinishReason,
  Logger,
  TaskSegment,
  TransitionResult,
  Usage,
  RedisClient,
} from '@app/common';
import { UsageAudit } from '../devices/usage-audit.service';
import { DispatcherMetrics } from '../infra/dispatcher-metrics.service';
import { JobSource } from '../queues/job-source.service';
import { Resumer } from '../queues/resumer.service';
import type { Closing } from '../relay/task-writer';
import { TaskWriters } from '../relay/task-writers.service';
import type { Assignment } from './assignment';
import { AssignmentBook } from './assignment-book';

/** What the finalizer makes of an outcome: the outcome itself, a requeue, or a resume. */
type Decision =
  | Outcome
  /** `avoid`: the device the task is not to go back to (an embedding batch it failed). */
  | { kind: 'requeue'; reason: string; avoid?: string }
  | { kind: 'resume'; cause: string };

/**
 * An embedding batch's failures that another device may not have: its runtime failed, or it sent
 * vectors that cannot be right. Nothing of a batch reaches the client before its ending (see
 * EmbedCollector), so such a batch goes to another device whole.
 */
const EMBED_RETRIED: ReadonlySet<string> = new Set(['device_protocol_error', 'device_output_exceeded']);

/** The UTF-8 bytes of what the client had before this assignment (a resumed task's answer so far). */
function priorBytes(a: Assignment): number {
  return a.continued ? Buffer.byteLength(a.continued.text) : 0;
}

/**
 * The usage of a resumed task's whole answer from its last device's: that device read the answer so
 * far as part of its prompt, which the client sent as the answer's tokens (as counted when relayed).
 */
export function wholeAnswerUsage(usage: Usage | null, continued: Continuation | null): Usage | null {
  if (!usage || !continued) {
    return usage;
  }
  const prompt = Math.max(0, usage.prompt_tokens - continued.tokens);
  const completion = usage.completion_tokens + continued.tokens;
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

/** How an assignment ends. */
export type Outcome =
  | { kind: 'completed'; finishReasons: FinishReason[]; usage: Usage | null }
  /**
   * The task fails; `stop` tells the device to stop (it is still running it). `resumable`: another
   * device may not fail so (the device's runtime failed): after output, the task may be resumed.
   */
  | {
      kind: 'failed';
      code: ErrorCode;
      message: string;
      stop: boolean;
      resumable?: boolean;
      /** `timed_out` for a silent device's (`device_timeout`); else `failed`. */
      status?: 'timed_out';
    }
  /** The client is gone (or the api holding it): the device is told to stop. */
  | { kind: 'cancelled' }
  /**
   * The device is gone, silent or refused it: another device takes the task (after output, continues
   * it, when the task may be resumed). `stop` tells the device to stop (a silent one may still run it).
   */
  | { kind: 'dropped'; reason: string; stop?: boolean }
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
    private readonly resumer: Resumer,
    @Inject(REDIS) private readonly redis: RedisClient,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  end(a: Assignment, outcome: Outcome): Promise<void> {
    if (a.ended) {
      return Promise.resolve();
    }
    a.ended = true;
    if (
      (outcome.kind === 'failed' && outcome.stop) ||
      (outcome.kind === 'dropped' && outcome.stop) ||
      outcome.kind === 'cancelled'
    ) {
      a.session.send('task:cancel', { task_address: a.address });
    }
    this.book.release(a);
    return this.writers.track(this.record(a, outcome));
  }

  /**
   * A dropped assignment becomes a requeue (no output yet), a resume (output reached the client, and
   * another device may continue it) or a failure; so does a resumable failure after output. The rest
   * as they are.
   */
  private async decide(a: Assignment, outcome: Outcome): Promise<Decision> {
    if (a.collector && outcome.kind === 'failed' && (outcome.resumable || EMBED_RETRIED.has(outcome.code))) {
      return this.retryBatch(a, outcome);
    }
    const resumable = outcome.kind === 'dropped' || (outcome.kind === 'failed' && outcome.resumable === true);
    if (!resumable) {
      return outcome;
    }
    const cause = outcome.kind === 'dropped' ? outcome.reason : outcome.code;
    if (a.relayed) {
      if (a.tracker.textOnly && (await this.resumer.allows(a.job, cause, a.session.id))) {
        return { kind: 'resume', cause };
      }
      if (outcome.kind === 'failed') {
        return outcome;
      }
      // Not resumed: the ending it had before resume (a silent device's is the api's device_timeout).
      return outcome.reason === 'device_timeout'
        ? {
            kind: 'failed',
            code: 'device_timeout',
            message: `The device sent nothing for ${this.config.TASK_IDLE_TIMEOUT_MS} ms.`,
            stop: false,
            status: 'timed_out',
          }
        : { kind: 'failed', code: 'device_disconnected', message: DISCONNECTED_MID_ANSWER, stop: false };
    }
    if (outcome.kind === 'failed') {
      return outcome;
    }
    // A resumed task's attempts that gave no output are counted apart from those that did.
    const resumes = a.continued?.resumes ?? 0;
    if (a.attempt > 0 && a.attempt < this.config.MAX_ATTEMPTS + resumes) {
      return { kind: 'requeue', reason: outcome.reason };
    }
    const message = `No device could complete the request (${a.attempt} attempt(s)).`;
    return { kind: 'failed', code: 'device_disconnected', message, stop: false };
  }

  /**
   * A failed embedding batch goes to another device while attempts are left and one that can take it
   * is online (not this one); else it fails with its error.
   */
  private async retryBatch(a: Assignment, outcome: Extract<Outcome, { kind: 'failed' }>): Promise<Decision> {
    const data = a.job.data;
    const left = a.attempt > 0 && a.attempt < this.config.MAX_ATTEMPTS;
    if (left && (await this.resumer.deviceElsewhere(a.job, data.requires, a.session.id))) {
      return { kind: 'requeue', reason: outcome.code, avoid: a.session.id };
    }
    return outcome;
  }

  /** The device's usage, bounded by what was asked and sent (tracker.bound); a clamp is counted and logged. */
  private bounded(a: Assignment, reported: Usage | null): Usage | null {
    const { usage, clamped } = a.tracker.bound(reported);
    if (clamped) {
      this.metrics.clampedUsage.inc();
      this.logger.warn({ task: a.address, reported, recorded: usage }, 'device usage clamped');
    }
    return usage;
  }

  /** An embedding batch's ending: its vectors (all of them, checked) with its `done`, in one entry. */
  private embedded(a: Assignment, usage: Usage | null): Closing {
    const collector = a.collector!;
    const counted = this.bounded(a, usage);
    return {
      kind: 'end',
      ending: {
        status: 'completed',
        promptTokens: counted?.prompt_tokens ?? null,
        completionTokens: counted ? 0 : null,
        outputSha256: collector.sha256(),
        outputBytes: collector.bytes,
        usageSource: counted ? 'device' : null,
      },
      output: [{ type: 'embedding', data: collector.all() }],
      event: { type: 'done', finish_reasons: [], usage: counted },
    };
  }

  private closing(a: Assignment, outcome: Decision): Closing {
    switch (outcome.kind) {
      case 'completed': {
        if (a.collector) {
          return this.embedded(a, outcome.usage);
        }
        this.audit.completed(
          a.session,
          outcome.usage?.completion_tokens ?? null,
          a.tracker.bytes,
          outcome.finishReasons.length,
        );
        const usage = wholeAnswerUsage(this.bounded(a, outcome.usage), a.continued);
        return {
          kind: 'end',
          ending: {
            status: 'completed',
            finishReason: outcome.finishReasons[0],
            promptTokens: usage?.prompt_tokens ?? null,
            completionTokens: usage?.completion_tokens ?? null,
            outputSha256: a.tracker.sha256,
            outputBytes: a.tracker.bytes + priorBytes(a),
            usageSource: usage ? 'device' : null,
            segments: this.segments(a, 'completed'),
          },
          event: {
            type: 'done',
            finish_reasons: outcome.finishReasons,
            usage,
            ...(outcome.finishReasons.length > 1
              ? { choice_tokens: Array.from(a.tracker.choiceTokens, (t) => t ?? 0) }
              : {}),
          },
        };
      }
      case 'failed':
        return {
          kind: 'end',
          ending: { status: outcome.status ?? 'failed', errorCode: outcome.code, ...this.delivered(a, outcome.code) },
          event: { type: 'error', code: outcome.code, message: outcome.message },
        };
      case 'cancelled':
        return {
          kind: 'end',
          ending: {
            status: 'cancelled',
            errorCode: 'client_disconnected',
            ...this.delivered(a, 'client_disconnected'),
          },
        };
      case 'requeue':
        return { kind: 'requeue', event: { type: 'requeued', reason: outcome.reason } };
      case 'resume':
        return { kind: 'resume', event: { type: 'resumed', reason: outcome.cause } };
      case 'dropped':
      case 'abandoned':
        return { kind: 'abandon' };
    }
  }

  /**
   * What a task that ends early delivered: its hash, and the tokens and bytes Switchyard counted as it
   * relayed them, so that usage bills what the client received.
   */
  private delivered(a: Assignment, ended: string) {
    const prior = a.continued;
    if (!a.relayed && !prior) {
      return {};
    }
    return {
      outputSha256: a.tracker.sha256,
      completionTokens: a.tracker.deltas + (prior?.tokens ?? 0),
      outputBytes: a.tracker.bytes + priorBytes(a),
      usageSource: 'relay' as const,
      segments: this.segments(a, ended),
    };
  }

  /** A resumed task's segments, this assignment's last (none for a task never resumed). */
  private segments(a: Assignment, ended: string): string | undefined {
    const prior = a.continued;
    if (!prior) {
      return undefined;
    }
    const t = a.tracker;
    const at = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
    const own: TaskSegment = {
      attempt: a.attempt,
      device_id: a.session.id,
      assigned_at: at(a.assignedAt),
      first_output_at: at(t.firstOutputAt),
      last_output_at: at(t.lastOutputAt),
      tokens: t.tokens,
      bytes: t.bytes,
      sha256: t.segmentSha256,
      ended,
    };
    return JSON.stringify(t.deltas > 0 ? [...prior.segments, own] : prior.segments);
  }

  private async record(a: Assignment, given: Outcome): Promise<void> {
    // The attempt (and whether there is one at all) is known once the claim is settled.
    await a.claimed;
    const outcome = await this.decide(a, given);
    let result: TransitionResult | null = null;
    if (a.writer) {
      result = await a.writer.close(this.closing(a, outcome));
    }
    const label = outcome.kind === 'failed' ? outcome.code : outcome.kind;
    a.trace?.end(label, a.tracker.firstOutputAt);
    if (outcome.kind === 'resume' && result?.ok) {
      await this.resumer.continueJob(a.job, a.token, outcome.cause);
      this.logger.info(
        {
          deviceId: a.session.id,
          task: a.address,
          requestId: a.job.data.requestId,
          traceId: traceIdOf(a.job.data.traceparent) ?? undefined,
          outcome: label,
          attempt: a.attempt,
        },
        'task assignment ended',
      );
      return;
    }
    try {
      if (outcome.kind === 'requeue' && result?.ok) {
        if (outcome.avoid) {
          await a.job.updateData({ ...a.job.data, avoid: [...(a.job.data.avoid ?? []), outcome.avoid] });
        }
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
      {
        deviceId: a.session.id,
        task: a.address,
        requestId: a.job.data.requestId,
        traceId: traceIdOf(a.job.data.traceparent) ?? undefined,
        outcome: label,
        attempt: a.attempt,
      },
      'task assignment ended',
    );
  }
}
