import { createHash, randomUUID } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import type { OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import type { Job } from 'bullmq';
import type { Redis } from 'ioredis';
import { APP_CONFIG, DISCONNECTED_MID_ANSWER, JOB_LOCK_MS, LOGGER, keys, retrying } from '@app/common';
import type { AppConfig, ChatJobData, DeltaPayload, DonePayload, Logger, TaskErrorPayload } from '@app/common';
import { DeviceRegistry } from '../devices/device-registry.service';
import type { ActiveTask, DeviceSession } from '../devices/device-session';
import { TaskQueueService } from '../queues/task-queue.service';
import { SUB_REDIS } from '../redis.providers';
import { TaskRecordsService } from '../tasks/task-records.service';
import { DispatcherMetrics } from '../metrics/dispatcher-metrics.service';
import { TaskStreamService } from './task-stream.service';

/** A safety net for nudges lost on the way (Pub/Sub does not persist): idle devices look again this often. */
const SWEEP_INTERVAL_MS = 1_000;
/** How long a device skips a queue after drawing a job it cannot serve. */
const UNSUPPORTED_SKIP_MS = 2_000;
/** How long a device that did not acknowledge an assignment is not offered jobs of that queue. */
const NO_ACK_SKIP_MS = 60_000;
/** Cancels that found no task here are remembered this long, for a claim that was in flight. */
const CANCEL_MEMORY_MS = 60_000;
/** How often orphaned tasks are looked for, and how far past their deadlines they must be. */
const REAP_INTERVAL_MS = 30_000;
const REAP_MARGIN_MS = 60_000;

/**
 * Hands jobs to idle devices and relays what they send back: claim, assign, relay, finish, and the
 * failure paths (no ack, device gone before or after the first output, cancel).
 */
@Injectable()
export class DispatchService implements OnModuleInit, OnApplicationShutdown {
  private sweepTimer: NodeJS.Timeout | null = null;
  private reapTimer: NodeJS.Timeout | null = null;
  /** Task ids cancelled while no device here held them, with when to forget them. */
  private readonly recentCancels = new Map<string, number>();
  /** Set at shutdown: no more jobs are fetched. */
  private draining = false;
  /**
   * Per queue, jobs announced (sy:jobs) and not yet taken by this instance, as far as it knows:
   * another dispatcher may have taken them, which an empty fetch reveals. A device that becomes
   * idle fetches only from queues with announced jobs, the sweep from every queue.
   */
  private readonly announced = new Map<string, number>();

  constructor(
    private readonly registry: DeviceRegistry,
    private readonly queues: TaskQueueService,
    private readonly records: TaskRecordsService,
    private readonly stream: TaskStreamService,
    private readonly metrics: DispatcherMetrics,
    @Inject(SUB_REDIS) private readonly sub: Redis,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  async onModuleInit(): Promise<void> {
    await this.sub.subscribe(keys.jobsChannel, keys.cancelChannel);
    this.sub.on('message', (channel: string, message: string) => {
      if (channel === keys.jobsChannel) {
        this.onJobsWaiting(message);
      } else if (channel === keys.cancelChannel) {
        void this.cancel(message).catch((err: unknown) => this.logger.error({ err }, 'cancel failed'));
      }
    });
    this.sweepTimer = setInterval(() => this.sweep(), SWEEP_INTERVAL_MS);
    this.sweepTimer.unref();
    this.reapTimer = setInterval(() => void this.reap(), REAP_INTERVAL_MS);
    this.reapTimer.unref();
  }

  onApplicationShutdown(): void {
    if (this.sweepTimer) {
      clearInterval(this.sweepTimer);
    }
    if (this.reapTimer) {
      clearInterval(this.reapTimer);
    }
  }

  private async reap(): Promise<void> {
    try {
      const count = await this.records.reapOrphans(
        this.config.QUEUE_TIMEOUT_MS,
        this.config.MAX_STREAM_MS,
        REAP_MARGIN_MS,
      );
      if (count > 0) {
        this.logger.warn({ count }, 'ended orphaned tasks (their api instance was gone)');
      }
    } catch (err) {
      this.logger.warn({ err: (err as Error).message }, 'orphan check failed');
    }
  }

  /** A queue has a new job: offer it to one of this instance's idle devices for that queue. */
  onJobsWaiting(queue: string): void {
    this.announced.set(queue, (this.announced.get(queue) ?? 0) + 1);
    this.offer(queue);
  }

  /**
   * One idle device (in turn) looks in the queue. Each job is announced once, so one fetch per job
   * and dispatcher is enough; a device that finds a job offers the queue to the next idle device
   * while more jobs were announced than taken, which drains a backlog without waking every idle
   * device for every job.
   */
  private offer(queue: string): void {
    const device = this.registry.nextIdle(queue);
    if (device) {
      this.kick(device, [queue]);
    }
  }

  /**
   * A safety net for announcements lost on the way and for jobs nobody announces (back from a dead
   * dispatcher): each queue is looked at by one idle device, queues spread over the idle devices.
   */
  private sweep(): void {
    const now = Date.now();
    for (const [taskId, until] of this.recentCancels) {
      if (until < now) {
        this.recentCancels.delete(taskId);
      }
    }
    const plan = new Map<DeviceSession, string[]>();
    for (const queue of this.registry.queues()) {
      const device = this.registry.nextIdle(queue);
      if (device) {
        plan.set(device, [...(plan.get(device) ?? []), queue]);
      }
    }
    for (const [device, queues] of plan) {
      this.kick(device, queues);
    }
  }

  /**
   * Looks for a job for an idle device: in the queues it is given, then in its other queues that
   * have jobs announced and not yet taken here; in all its queues with `'all'` (a device that just
   * came). At most one fetch per device is under way.
   */
  kick(device: DeviceSession, given: readonly string[] | 'all' = []): void {
    if (this.draining || !device.idle || device.fetching) {
      return;
    }
    device.fetching = true;
    void this.fetchFor(device, given)
      .catch((err: unknown) => this.logger.error({ err, deviceId: device.id }, 'fetch failed'))
      .finally(() => {
        device.fetching = false;
      });
  }

  private async fetchFor(device: DeviceSession, given: readonly string[] | 'all'): Promise<void> {
    const queues = device.queues();
    const first = given === 'all' ? queues : given.filter((q) => queues.includes(q));
    for (const queue of [...first, ...queues.filter((q) => !first.includes(q))]) {
      if (!device.idle) {
        return;
      }
      const before = this.announced.get(queue) ?? 0;
      if (before === 0 && !first.includes(queue)) {
        continue;
      }
      const token = `${device.id}:${randomUUID()}`;
      const job = await this.queues.fetch(queue, token);
      // Announcements may have come in during the fetch: they count for jobs still to take.
      const current = this.announced.get(queue) ?? 0;
      const left = job ? Math.max(0, current - 1) : Math.max(0, current - before);
      if (left > 0) {
        this.announced.set(queue, left);
      } else {
        this.announced.delete(queue);
      }
      if (!job) {
        // Empty: what was announced before was taken elsewhere.
        continue;
      }
      // There may be more where this one came from: more were announced, or this one was not (a
      // job back from a dead dispatcher, found by the sweep).
      if (left > 0 || before === 0) {
        this.offer(queue);
      }
      if (await this.assign(device, queue, job, token)) {
        return;
      }
    }
  }

  /** Claims the task row, then hands the job to the device. Returns whether the device took it. */
  private async assign(device: DeviceSession, queue: string, job: Job<ChatJobData>, token: string): Promise<boolean> {
    const data = job.data;
    if (!device.supports(data.requires)) {
      // Hand the job to an idle device here that can serve it; else put it back for another
      // dispatcher's, and let this device look past that queue for a moment so it does not keep
      // taking the same job (and starving the capable devices).
      device.skipQueue(queue, UNSUPPORTED_SKIP_MS);
      const capable = this.registry
        .idleFor(queue)
        .find((d) => d !== device && d.supports(data.requires) && !d.fetching);
      if (capable) {
        capable.fetching = true;
        try {
          return await this.assign(capable, queue, job, token);
        } finally {
          capable.fetching = false;
        }
      }
      await job.moveToWait(token);
      await this.queues.nudge(queue);
      return false;
    }
    const claim = await this.records.claim(data.taskId, device.id);
    if (!claim.claimed) {
      if (claim.status === 'streaming') {
        // Its dispatcher died after output reached the client: it cannot start over elsewhere.
        await this.records.end(data.taskId, 'failed', 'device_disconnected');
        await this.stream.append(data.taskId, disconnectedMidAnswer());
        job.discard();
        await job.moveToFailed(new Error('device_disconnected'), token, false).catch(() => undefined);
      } else {
        // Cancelled or timed out while it waited: nothing to do but drop the job.
        await job.moveToCompleted('skipped', token, false).catch(() => undefined);
      }
      return false;
    }
    const active: ActiveTask = {
      taskId: data.taskId,
      address: data.taskAddress,
      job,
      token,
      queue,
      attempt: claim.attempts,
      accepted: false,
      firstTokenAt: null,
      nextSeq: 0,
      output: createHash('sha256'),
      lockTimer: null,
      ended: false,
      writer: this.stream.writer(data.taskId, claim.attempts, () => void this.onRelayLost(device, active)),
    };
    device.task = active;
    this.registry.holdTask(data.taskId, device);
    if (this.recentCancels.delete(data.taskId)) {
      await this.cancel(data.taskId);
      return true;
    }
    active.lockTimer = setInterval(() => {
      void job.extendLock(token, JOB_LOCK_MS).catch(() => undefined);
    }, JOB_LOCK_MS / 2);
    let accepted = false;
    let answered = false;
    try {
      const answer = await device.socket.timeout(this.config.ASSIGN_ACK_TIMEOUT_MS).emitWithAck('task:assign', {
        task_address: data.taskAddress,
        model: data.model,
        attempt: claim.attempts,
        params: data.params,
        ...(data.requestId ? { request_id: data.requestId } : {}),
      });
      answered = true;
      accepted = answer?.accepted === true;
    } catch {
      accepted = false;
    }
    if (active.ended) {
      return true;
    }
    if (!accepted) {
      this.metrics.assignments.inc({ result: 'refused' });
      // A device that refused looks past this queue for a moment; one that did not answer at all is
      // likely stuck and is left out much longer, so the job goes to another device.
      device.skipQueue(queue, answered ? UNSUPPORTED_SKIP_MS : NO_ACK_SKIP_MS);
      this.logger.warn(
        { deviceId: device.id, task: data.taskAddress, requestId: data.requestId },
        'device did not accept the assignment',
      );
      await this.retryOrFail(device, active, 'no_ack');
      return false;
    }
    active.accepted = true;
    this.metrics.assignments.inc({ result: 'accepted' });
    this.logger.info(
      { deviceId: device.id, task: data.taskAddress, requestId: data.requestId, attempt: claim.attempts },
      'task assigned',
    );
    active.writer.push({ type: 'assigned', device_id: device.id, attempt: claim.attempts });
    return true;
  }

  /** The task a device may send events for: its current one, matched by address. */
  private activeFor(device: DeviceSession, address: string): ActiveTask | null {
    const task = device.task;
    if (!task || task.ended || task.address !== address) {
      this.metrics.invalidEvents.inc({ reason: 'foreign_task' });
      this.logger.warn({ deviceId: device.id, task: address }, 'event for a task the device does not hold: ignored');
      return null;
    }
    return task;
  }

  private checkSeq(device: DeviceSession, task: ActiveTask, seq: number): boolean {
    if (seq !== task.nextSeq) {
      this.metrics.invalidEvents.inc({ reason: 'out_of_order' });
      this.logger.warn({ deviceId: device.id, task: task.address, seq, expected: task.nextSeq }, 'out-of-order event');
      return false;
    }
    task.nextSeq++;
    return true;
  }

  onDelta(device: DeviceSession, payload: DeltaPayload): void {
    const task = this.activeFor(device, payload.task_address);
    if (!task || !this.checkSeq(device, task, payload.seq)) {
      return;
    }
    for (const choice of payload.choices) {
      task.output.update(choice.content ?? '');
      if (choice.tool_calls) {
        task.output.update(JSON.stringify(choice.tool_calls));
      }
    }
    if (!task.firstTokenAt) {
      task.firstTokenAt = new Date();
      // Written a little later, with others: the first token must not wait for Postgres.
      this.records.markStreaming(task.taskId, task.firstTokenAt);
    }
    task.writer.push({ type: 'delta', choices: payload.choices });
  }

  async onDone(device: DeviceSession, payload: DonePayload): Promise<void> {
    const task = this.activeFor(device, payload.task_address);
    if (!task || !this.checkSeq(device, task, payload.seq)) {
      return;
    }
    this.release(device, task);
    // The row first, so that a client holding its answer finds it recorded. While Postgres is
    // unreachable this is retried for as long as the api waits for the ending; past that the api has
    // ended the task itself (and told its client).
    const result = {
      finishReason: payload.finish_reasons[0],
      usage: payload.usage,
      outputSha256: task.output.digest('hex'),
      firstTokenAt: task.firstTokenAt,
    };
    const completed = await retrying(
      () => this.records.complete(task.taskId, result),
      this.config.TASK_IDLE_TIMEOUT_MS,
    );
    if (completed) {
      task.writer.push({ type: 'done', finish_reasons: payload.finish_reasons, usage: payload.usage });
    } else {
      this.logger.warn({ task: task.address }, 'the task was ended elsewhere before its completion was recorded');
    }
    await task.job.moveToCompleted('done', task.token, false).catch(() => undefined);
    this.metrics.tasks.inc({ outcome: 'completed' });
    this.logger.info(
      { deviceId: device.id, task: task.address, requestId: task.job.data.requestId, usage: payload.usage },
      'task completed',
    );
    this.kick(device);
  }

  async onError(device: DeviceSession, payload: TaskErrorPayload): Promise<void> {
    const task = this.activeFor(device, payload.task_address);
    if (!task || !this.checkSeq(device, task, payload.seq)) {
      return;
    }
    this.release(device, task);
    const code = payload.code === 'cancelled' ? 'device_error' : payload.code;
    await this.records.end(task.taskId, 'failed', code, outputOf(task));
    task.writer.push({
      type: 'error',
      code,
      message: `The device could not complete the request: ${payload.message}`,
      status: DEVICE_ERROR_STATUS[code] ?? 502,
    });
    task.job.discard();
    await task.job.moveToFailed(new Error(code), task.token, false).catch(() => undefined);
    this.metrics.tasks.inc({ outcome: code });
    this.kick(device);
  }

  /** The device sent a malformed event for its own task: the task fails, the device is free again. */
  async onInvalidEvent(device: DeviceSession, reason: string): Promise<void> {
    const task = device.task;
    if (!task || task.ended) {
      return;
    }
    this.release(device, task);
    device.socket.emit('task:cancel', { task_address: task.address });
    await this.records.end(task.taskId, 'failed', 'device_protocol_error', outputOf(task));
    task.writer.push({
      type: 'error',
      code: 'device_protocol_error',
      message: 'The device serving this request sent an invalid event.',
      status: 502,
    });
    task.job.discard();
    await task.job.moveToFailed(new Error(reason), task.token, false).catch(() => undefined);
    this.metrics.tasks.inc({ outcome: 'device_protocol_error' });
    this.logger.warn({ deviceId: device.id, task: task.address, reason }, 'task failed: invalid event from its device');
    this.kick(device);
  }

  /** The device's connection is gone: requeue its task if no output was relayed, else fail it. */
  async onDisconnect(device: DeviceSession): Promise<void> {
    const task = device.task;
    if (!task || task.ended) {
      return;
    }
    if (task.firstTokenAt) {
      this.release(device, task);
      await this.records.end(task.taskId, 'failed', 'device_disconnected', outputOf(task));
      task.writer.push(disconnectedMidAnswer());
      this.metrics.tasks.inc({ outcome: 'device_disconnected' });
      task.job.discard();
      await task.job.moveToFailed(new Error('device_disconnected'), task.token, false).catch(() => undefined);
    } else {
      await this.retryOrFail(device, task, 'device_disconnected');
    }
  }

  /** Gives a task with no output yet to another device, up to MAX_ATTEMPTS assignments. */
  private async retryOrFail(device: DeviceSession, task: ActiveTask, reason: string): Promise<void> {
    this.release(device, task);
    if (task.attempt < this.config.MAX_ATTEMPTS && (await this.records.requeue(task.taskId, device.id))) {
      task.writer.push({ type: 'requeued', reason });
      this.metrics.assignments.inc({ result: 'requeued' });
      await task.job.moveToFailed(new Error(reason), task.token, false).catch(() => undefined);
      await this.queues.nudge(task.queue);
      return;
    }
    if (await this.records.end(task.taskId, 'failed', 'device_disconnected')) {
      task.writer.push({
        type: 'error',
        code: 'device_disconnected',
        message: `No device could complete the request (${task.attempt} attempt(s)).`,
        status: 502,
      });
      this.metrics.tasks.inc({ outcome: 'device_disconnected' });
    }
    task.job.discard();
    await task.job.moveToFailed(new Error(reason), task.token, false).catch(() => undefined);
    this.kick(device);
  }

  /** The client went away: stop the device if this instance holds the task. */
  async cancel(taskId: string): Promise<void> {
    const device = this.registry.findTask(taskId);
    const task = device?.task;
    if (!device || !task || task.ended) {
      // The task may be between its claim and its assignment here: remember the cancel for it.
      this.recentCancels.set(taskId, Date.now() + CANCEL_MEMORY_MS);
      return;
    }
    this.release(device, task);
    device.socket.emit('task:cancel', { task_address: task.address });
    await this.records.cancelled(task.taskId, outputOf(task));
    await task.job.moveToCompleted('cancelled', task.token, false).catch(() => undefined);
    this.metrics.tasks.inc({ outcome: 'cancelled' });
    this.logger.info(
      { deviceId: device.id, task: task.address, requestId: task.job.data.requestId },
      'task cancelled by the client',
    );
    this.kick(device);
  }

  /**
   * The task's events could not be written to Redis for longer than the api waits for them: its
   * client has lost part of the answer, so the device stops and the task fails (the api tells its
   * client, or already has). Nothing is relayed silently with a gap.
   */
  private async onRelayLost(device: DeviceSession, task: ActiveTask): Promise<void> {
    if (task.ended) {
      return;
    }
    this.release(device, task);
    device.socket.emit('task:cancel', { task_address: task.address });
    await this.records.end(task.taskId, 'failed', 'relay_interrupted', outputOf(task)).catch((err: unknown) => {
      this.logger.error({ err, task: task.address }, 'could not record the interrupted task');
    });
    task.job.discard();
    await task.job.moveToFailed(new Error('relay_interrupted'), task.token, false).catch(() => undefined);
    this.metrics.tasks.inc({ outcome: 'relay_interrupted' });
    this.kick(device);
  }

  /**
   * Shutdown: fetch nothing more, give the tasks in progress SHUTDOWN_GRACE_MS to finish, then
   * treat their devices as gone (requeued when nothing was sent yet, else an explicit error).
   */
  async drain(): Promise<void> {
    this.draining = true;
    const busy = () => [...this.registry.all()].filter((d) => d.task && !d.task.ended);
    const deadline = Date.now() + this.config.SHUTDOWN_GRACE_MS;
    while (busy().length > 0 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
    }
    await Promise.all(
      busy().map((device) => {
        device.socket.emit('task:cancel', { task_address: device.task!.address });
        return this.onDisconnect(device);
      }),
    );
    // The endings just decided must reach the api before the process goes.
    await this.stream.flushAll(5_000);
    await this.records.flush();
  }

  /** Detaches a task from its device (once). */
  private release(device: DeviceSession, task: ActiveTask): void {
    task.ended = true;
    if (task.lockTimer) {
      clearInterval(task.lockTimer);
    }
    if (device.task === task) {
      device.task = null;
      this.registry.holdTask(task.taskId, null);
    }
  }
}

/** What a task had relayed, for its row: the output's hash and when it began. */
function outputOf(task: ActiveTask): { sha256: string; firstTokenAt: Date } | null {
  return task.firstTokenAt ? { sha256: task.output.digest('hex'), firstTokenAt: task.firstTokenAt } : null;
}

/**
 * HTTP status for the error codes devices report (docs/device.md lists them): the client's fault
 * is a 4xx, as the runtime itself would answer; an overloaded runtime a 503; anything else a 502.
 */
const DEVICE_ERROR_STATUS: Record<string, number> = {
  context_length_exceeded: 400,
  invalid_request: 400,
  upstream_bad_request: 400,
  unsupported_by_model: 400,
  upstream_busy: 503,
};

function disconnectedMidAnswer() {
  return {
    type: 'error' as const,
    code: 'device_disconnected',
    message: DISCONNECTED_MID_ANSWER,
    status: 502,
  };
}
