import { Inject, Injectable } from '@nestjs/common';
import type { OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import {
  APP_CONFIG,
  LOGGER,
  TaskRepository,
  queueOfLine,
  REDIS,
  InstanceService,
  Announcements,
  traceIdOf,
} from '@app/common';
import type {
  AppConfig,
  AssignAck,
  AssignPayload,
  ChatJobData,
  ChatParams,
  JobData,
  Logger,
  RedisClient,
} from '@app/common';
import { DeviceGateway } from '../devices/device.gateway';
import type { DeviceAnswer, DeviceSession } from '../devices/device-session';
import { DispatcherMetrics } from '../infra/dispatcher-metrics.service';
import { JobSource } from '../queues/job-source.service';
import type { TaskJob } from '../queues/job-source.service';
import { QueueWatch } from '../queues/queue-watch.service';
import { Resumer } from '../queues/resumer.service';
import type { QueueEvents } from '../queues/queue-watch.service';
import { EmbedCollector } from '../relay/embed-collector';
import { OutputTracker } from '../relay/output-tracker';
import { TaskWriters } from '../relay/task-writers.service';
import { Assignment } from './assignment';
import { TaskTrace } from './task-trace';
import { AssignmentBook } from './assignment-book';
import { Finalizer } from './finalizer.service';
import { IdleDevices } from './idle-devices';
import { Loan } from './loan';
import type { LoanListener } from './loan';
import { Skips } from './skips';

/**
 * The request a device is given: a resumed task's carries the answer so far as the assistant's
 * prefix, and what is left of max_tokens (at least 1: a device lost exactly at the limit still ends
 * the answer, with `length`).
 */
export function assignedParams(data: ChatJobData): ChatParams {
  const c = data.continued;
  if (!c) {
    return data.params;
  }
  return { ...data.params, assistant_prefix: c.text, max_tokens: Math.max(1, data.params.max_tokens - c.tokens) };
}

/**
 * Whether the task is not to go back to this device: an embedding batch it failed (retried on another
 * device), or a resumed task it was dropped from for its silence (it is likely stuck, so the task goes
 * to another device rather than back to one that would not acknowledge it).
 */
function avoided(session: DeviceSession, data: JobData): boolean {
  if (data.avoid?.includes(session.id)) {
    return true;
  }
  const last = data.kind === 'embed' ? undefined : data.continued?.segments.at(-1);
  return last?.device_id === session.id && last.ended === 'device_timeout';
}

/** Whether the client reads the task's output as it comes (an embedding's client takes it whole). */
function streams(data: JobData): boolean {
  return data.kind !== 'embed' && data.stream !== false;
}

/** The assignment of a job: what its device is sent, how its output is tracked and, for embeddings, collected. */
function assignmentOf(
  data: JobData,
  attempt: number,
): {
  payload: AssignPayload;
  tracker: OutputTracker;
  collector: EmbedCollector | null;
} {
  const common = {
    task_address: data.taskAddress,
    model: data.model,
    attempt,
    ...(data.requestId ? { request_id: data.requestId } : {}),
  };
  if (data.kind === 'embed') {
    return {
      payload: { ...common, kind: 'embed', embed: data.embed },
      tracker: OutputTracker.forEmbedding(data.embed),
      collector: new EmbedCollector(data.embed),
    };
  }
  const params = assignedParams(data);
  return { payload: { ...common, params }, tracker: OutputTracker.forRequest(params), collector: null };
}

/** A safety net for announcements lost on the way (Pub/Sub does not persist): backlogs are looked at this often. */
const SWEEP_INTERVAL_MS = 1_000;
/** How long a device looks past a queue after drawing a job it cannot serve, or refusing one. */
const SKIP_MS = 2_000;
/** How long a device that did not acknowledge is not offered that queue: another device may take it; a slow one is back soon. */
const NO_ACK_SKIP_MS = 10_000;
/** Cancels that found no task here are remembered this long, for a claim that was in flight. */
const CANCEL_MEMORY_MS = 60_000;

/**
 * Hands jobs to idle devices: a job announced on a line goes at once to the device of its queue idle
 * longest (one round trip to take it); a device that becomes free takes the next job of its queues in
 * fair-share order. The claim and the assignment go out in the same turn; the device starts at once
 * and acknowledges meanwhile. Also the cancels the apis publish.
 */
@Injectable()
export class Assigner implements OnModuleInit, OnModuleDestroy, QueueEvents {
  private readonly idle = new IdleDevices();
  private readonly fetching = new Set<DeviceSession>();
  /** Queues known (from announcements and sweeps) to have waiting jobs, with the number of the latest mark. */
  private readonly backlog = new Map<string, number>();
  private marks = 0;
  private readonly skips = new Skips();
  private readonly recentCancels = new Map<string, number>();
  private sweepTimer: NodeJS.Timeout | null = null;
  private draining = false;
  private tokens = 0;

  constructor(
    private readonly book: AssignmentBook,
    private readonly finalizer: Finalizer,
    private readonly jobs: JobSource,
    private readonly resumer: Resumer,
    private readonly watch: QueueWatch,
    private readonly tasks: TaskRepository,
    private readonly writers: TaskWriters,
    private readonly instance: InstanceService,
    private readonly metrics: DispatcherMetrics,
    private readonly gateway: DeviceGateway,
    @Inject(REDIS) private readonly redis: RedisClient,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  onModuleInit(): void {
    this.watch.listen(this);
    this.book.whenFree((session) => this.offer(session));
    this.sweepTimer = setInterval(() => {
      this.sweep().catch((err: unknown) => this.logger.warn({ err: (err as Error).message }, 'sweep failed'));
    }, SWEEP_INTERVAL_MS);
    this.sweepTimer.unref();
  }

  onModuleDestroy(): void {
    if (this.sweepTimer) {
      clearInterval(this.sweepTimer);
    }
  }

  /** A device that may be able to take work: offered the backlog of its queues, else kept idle. */
  offer(session: DeviceSession): void {
    if (this.draining || !session.ready || this.book.busy(session) || this.fetching.has(session)) {
      this.idle.remove(session);
      this.prefetch(session);
      return;
    }
    this.idle.add(session);
    if (session.queues.some((q) => this.backlog.has(q))) {
      void this.fetchFor(session, null, performance.now());
    }
  }

  /**
   * A device that holds one embedding task and takes a second beside it (`embed_prefetch`): the next
   * batch waiting in that task's queue, so that its runtime has it as soon as it is done with the one
   * before (the agent still sends that one's vectors meanwhile). Only that queue: a queue serves one
   * model, so its jobs are embeddings too.
   */
  private prefetch(session: DeviceSession): void {
    const beside = this.book.prefetchBeside(session);
    if (!beside || beside.ended || this.draining || !session.ready || this.fetching.has(session)) {
      return;
    }
    const queue = queueOfLine(beside.line);
    if (this.backlog.has(queue) && !this.skips.skipping(session, queue)) {
      void this.fetchFor(session, null, performance.now(), queue);
    }
  }

  /**
   * Lends an idle device for a task of the dispatcher's own (a canary), when no organization's job
   * waits for it: not here (no announcement or sweep marked one of its queues) nor in Redis. A held
   * device (on probation) takes no jobs: it is lent whenever it is free. Null when it cannot be lent now.
   */
  async lend(
    session: DeviceSession,
    address: string,
    tracker: OutputTracker,
    listener: LoanListener,
  ): Promise<Loan | null> {
    if (!this.lendable(session)) {
      return null;
    }
    if (session.ready) {
      const waiting = new Set(await this.jobs.backlogged());
      if (session.queues.some((q) => waiting.has(q)) || !this.lendable(session)) {
        return null;
      }
    }
    this.idle.remove(session);
    const loan = new Loan(session, address, tracker, listener);
    this.book.lend(loan);
    return loan;
  }

  /** Whether the device could be lent now, as far as this dispatcher knows (lend also asks Redis). */
  lendable(session: DeviceSession): boolean {
    if (this.draining || !session.running || this.book.busy(session) || this.fetching.has(session)) {
      return false;
    }
    return !session.ready || (this.idle.has(session) && !session.queues.some((q) => this.backlog.has(q)));
  }

  /** A device that can take no work now (gone, unavailable). */
  withdraw(session: DeviceSession): void {
    this.idle.remove(session);
  }

  onJobWaiting(line: string): void {
    const queue = queueOfLine(line);
    this.markBacklog(queue);
    const device = this.idle.first(queue, (d) => !this.skips.skipping(d, queue));
    if (device && !this.draining) {
      void this.fetchFor(device, line, performance.now());
    }
  }

  /** The queue has waiting jobs (an announcement, a sweep): a newer mark than any answer in flight saw. */
  private markBacklog(queue: string): void {
    this.backlog.set(queue, ++this.marks);
  }

  onCancel(taskId: string): void {
    const assignment = this.book.forTask(taskId);
    if (assignment) {
      void this.finalizer.end(assignment, { kind: 'cancelled' });
    } else {
      // The task may be between its claim and its assignment here: remember the cancel for it.
      this.recentCancels.set(taskId, Date.now() + CANCEL_MEMORY_MS);
    }
  }

  /**
   * Takes a job for the device: from `line` (just announced), else from its backlogged queues in turn
   * (`only` that one, for a second embedding task beside the one it holds).
   */
  private async fetchFor(session: DeviceSession, line: string | null, since: number, only?: string): Promise<void> {
    this.idle.remove(session);
    this.fetching.add(session);
    let assigned = false;
    try {
      const token = `${this.instance.id}:${++this.tokens}`;
      if (line) {
        // The take left the queue no backlog and no mark came since: a freed device need not look.
        const queue = queueOfLine(line);
        const mark = this.backlog.get(queue);
        const job = await this.jobs.takeFrom(line, token, (backlog) => {
          if (!backlog && this.backlog.get(queue) === mark) {
            this.backlog.delete(queue);
          }
        });
        assigned = job !== undefined && (await this.assign(session, job, token, since));
      }
      for (const queue of only ? [only] : session.queues) {
        if (assigned || !session.ready || this.draining) {
          break;
        }
        if (!this.backlog.has(queue) || this.skips.skipping(session, queue)) {
          continue;
        }
        const job = await this.jobs.takeNext(queue, token);
        if (!job) {
          this.backlog.delete(queue);
          continue;
        }
        assigned = await this.assign(session, job, token, since);
      }
    } catch (err) {
      this.logger.error({ err, deviceId: session.id }, 'fetching a job failed');
    } finally {
      this.fetching.delete(session);
    }
    if (assigned) {
      // An embedding task: the device may take the next batch beside it.
      this.prefetch(session);
    } else {
      this.offerIdle(session);
    }
  }

  /** Back to the idle devices without looking again (nothing was found just now). */
  private offerIdle(session: DeviceSession): void {
    if (!this.draining && session.ready && !this.book.busy(session)) {
      this.idle.add(session);
    }
  }

  /** Hands the job to the device (or to an idle one here that can serve it). Whether a device took it. */
  private async assign(session: DeviceSession, job: TaskJob, token: string, since: number): Promise<boolean> {
    const data = job.data;
    const queue = queueOfLine(job.queueName);
    // A device that holds a task already takes only a second embedding one (see prefetch).
    const fits = (d: DeviceSession) =>
      d.supports(data.requires) && !avoided(d, data) && (!this.book.busy(d) || data.kind === 'embed');
    if (!fits(session)) {
      this.skips.skip(session, queue, SKIP_MS);
      const capable = this.idle.first(queue, (d) => fits(d) && !this.skips.skipping(d, queue));
      if (capable) {
        this.idle.remove(capable);
        return this.assign(capable, job, token, since);
      }
      // Another dispatcher may have a device that can.
      await this.jobs.putBack(job, token);
      await Announcements.jobWaiting(this.redis, job.queueName);
      return false;
    }
    const { payload, tracker, collector } = assignmentOf(data, job.attemptsStarted);
    const assignment = new Assignment(session, job, token, tracker, collector);
    // Taken when the device was found for it: `since` is on the monotonic clock, spans on the epoch one.
    assignment.trace = TaskTrace.start(
      data,
      job.timestamp,
      Date.now() - (performance.now() - since),
      session.id,
      job.attemptsStarted,
    );
    if (assignment.trace) {
      payload.traceparent = assignment.trace.traceparent;
    }
    this.book.add(assignment);
    this.claim(assignment);
    session.request('task:assign', payload, this.config.ASSIGN_ACK_TIMEOUT_MS, (answer) =>
      this.onAck(assignment, queue, answer),
    );
    this.metrics.assignLatency.observe((performance.now() - since) / 1000);
    if (this.recentCancels.delete(data.taskId)) {
      void this.finalizer.end(assignment, { kind: 'cancelled' });
    }
    return true;
  }

  /** The claim goes out with the assignment; events the device sends before it is confirmed wait. */
  private claim(a: Assignment): void {
    const claimant = {
      deviceId: a.session.id,
      modelDigest: a.session.digestOf(a.job.data.model),
      dispatcherId: this.instance.id,
      token: a.token,
    };
    this.tasks.claim(a.taskId, claimant, a.continued?.resumes ?? 0).then(
      (result) => {
        if (result.ok) {
          a.settle({
            attempt: result.attempt,
            writer: this.writers.writer(a.taskId, result.attempt, streams(a.job.data), {
              onRefused: () => void this.finalizer.end(a, { kind: 'abandoned' }),
              onLost: () => {
                this.logger.error({ task: a.address }, 'task events could not be written to Redis: given up');
                void this.finalizer.end(a, {
                  kind: 'failed',
                  code: 'relay_interrupted',
                  message: 'Part of the answer was lost on the way; the request was stopped. Retry it.',
                  stop: true,
                });
              },
            }),
          });
          return;
        }
        // Cancelled or timed out while it waited: the device stops, the job goes. A job that missed a
        // resume (its resumer died before writing the answer so far into it) ends its task: its device
        // would start the answer again.
        if (result.status === 'resumed') {
          this.resumer
            .endWaiting(a.taskId)
            .catch((err: unknown) => this.logger.warn({ err, task: a.address }, 'could not end the task'));
        }
        a.settle(null);
        a.session.send('task:cancel', { task_address: a.address });
        void this.finalizer.end(a, { kind: 'abandoned' });
      },
      (err: unknown) => {
        this.logger.error({ err, task: a.address }, 'could not claim the task');
        a.settle(null);
        a.session.send('task:cancel', { task_address: a.address });
        void this.finalizer.end(a, { kind: 'abandoned' });
      },
    );
  }

  private onAck(a: Assignment, queue: string, result: DeviceAnswer<AssignAck>): void {
    if (a.ended) {
      return;
    }
    if (!result.ok && result.reason === 'malformed') {
      // An answer that fails its schema is a device's invalid event like any other; unread, it counts as none.
      this.logger.warn(
        { deviceId: a.session.id, task: a.address, reason: 'malformed', detail: result.problem },
        'invalid acknowledgement from device: ignored',
      );
      this.gateway.strike(a.session, 'malformed');
    }
    const answer = result.ok ? result.answer : null;
    if (answer?.accepted === true) {
      a.accepted = true;
      a.trace?.answered();
      this.metrics.assignments.inc({ result: 'accepted' });
      this.logger.info(
        {
          deviceId: a.session.id,
          task: a.address,
          requestId: a.job.data.requestId,
          traceId: traceIdOf(a.job.data.traceparent) ?? undefined,
          attempt: a.attempt,
        },
        'task assigned',
      );
      return;
    }
    a.trace?.answered(answer && !answer.accepted ? answer.reason : 'no_answer');
    this.metrics.assignments.inc({ result: 'refused' });
    // A device that refused looks past this queue for a moment; one that did not answer at all is
    // likely stuck and is left out much longer, so the job goes to another device.
    this.skips.skip(a.session, queue, answer ? SKIP_MS : NO_ACK_SKIP_MS);
    this.logger.warn(
      { deviceId: a.session.id, task: a.address, reason: answer && !answer.accepted ? answer.reason : 'no answer' },
      'device did not accept the assignment',
    );
    if (!answer) {
      a.session.send('task:cancel', { task_address: a.address });
    }
    void this.finalizer.end(a, { kind: 'dropped', reason: answer ? 'refused' : 'no_ack' });
  }

  /** Backlogs whose announcements were lost, and jobs nobody announced (put back by a takeover). */
  private async sweep(): Promise<void> {
    const now = Date.now();
    for (const [taskId, until] of this.recentCancels) {
      if (until < now) {
        this.recentCancels.delete(taskId);
      }
    }
    if (this.draining || this.idle.size === 0) {
      return;
    }
    const local = new Set(this.idle.queues());
    for (const queue of await this.jobs.backlogged()) {
      if (local.has(queue)) {
        this.markBacklog(queue);
        const device = this.idle.first(queue, (d) => !this.skips.skipping(d, queue));
        if (device) {
          void this.fetchFor(device, null, performance.now());
        }
      }
    }
  }

  /** Shutdown: no more jobs are fetched; idle devices stay idle. */
  stop(): void {
    this.draining = true;
    this.idle.clear();
  }
}
