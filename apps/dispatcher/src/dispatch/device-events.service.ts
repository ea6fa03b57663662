import { Inject, Injectable } from '@nestjs/common';
import type { OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { APP_CONFIG, LOGGER, clientCodeOf, deviceMessage, InstanceService } from '@app/common';
import type { AppConfig, DeltaPayload, DonePayload, EmbeddingPayload, Logger, TaskErrorPayload } from '@app/common';
import { DeviceGateway } from '../devices/device.gateway';
import type { DeviceListener } from '../devices/device-listener';
import { DeviceRegistry } from '../devices/device-registry.service';
import type { DeviceSession } from '../devices/device-session';
import { TaskWriters } from '../relay/task-writers.service';
import type { Assignment } from './assignment';
import { AssignmentBook } from './assignment-book';
import type { Loan, LoanLoss } from './loan';
import { Assigner } from './assigner.service';
import { Finalizer } from './finalizer.service';
import { RESUMABLE_DEVICE_ERRORS, Resumer } from '../queues/resumer.service';

/** How often the apis holding this dispatcher's tasks are checked for life. */
const API_CHECK_MS = 2_000;
/** How often assignments are checked for a silent device (TASK_IDLE_TIMEOUT_MS). */
const SILENCE_CHECK_MS = 500;

/**
 * What devices do, turned into what becomes of their tasks: output relayed in order, endings,
 * drops; for a lent device (Loan), its events go to the borrower. A device may send events only for
 * the task it holds, in sequence; anything else is a strike
 * against it (the gateway disconnects a device with too many). Also stops tasks whose api instance
 * died (their clients went with it), and drains at shutdown.
 */
@Injectable()
export class DeviceEvents implements DeviceListener, OnModuleInit, OnModuleDestroy {
  private apiTimer: NodeJS.Timeout | null = null;
  private silenceTimer: NodeJS.Timeout | null = null;

  constructor(
    registry: DeviceRegistry,
    private readonly gateway: DeviceGateway,
    private readonly book: AssignmentBook,
    private readonly assigner: Assigner,
    private readonly finalizer: Finalizer,
    private readonly writers: TaskWriters,
    private readonly instance: InstanceService,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {
    registry.listen(this);
  }

  onModuleInit(): void {
    this.apiTimer = setInterval(() => {
      this.stopOrphans().catch((err: unknown) =>
        this.logger.warn({ err: (err as Error).message }, 'could not check the apis of tasks'),
      );
    }, API_CHECK_MS);
    this.apiTimer.unref();
    this.silenceTimer = setInterval(() => this.dropSilent(), SILENCE_CHECK_MS);
    this.silenceTimer.unref();
  }

  onModuleDestroy(): void {
    if (this.apiTimer) {
      clearInterval(this.apiTimer);
    }
    if (this.silenceTimer) {
      clearInterval(this.silenceTimer);
    }
  }

  /**
   * A device silent for TASK_IDLE_TIMEOUT_MS about a task it had sent output for, when the task may be
   * resumed, is dropped (and told to stop): another device continues the answer (not this one: see
   * droppedForSilence in the assigner). The api waits a little
   * longer (FLIGHT_RESUME_GRACE_MS) before it gives up on such a task itself; every other silent task
   * is the api's to end (`device_timeout`), as before.
   */
  private dropSilent(): void {
    const now = Date.now();
    for (const a of [...this.book.all()]) {
      // Output was relayed (the task may be resumed only then): its last output is its device's last word.
      const last = a.tracker.lastOutputAt;
      const resumable = last !== null && Resumer.mayResume(a.job, this.config.RESUME_MAX_ATTEMPTS);
      if (!a.ended && resumable && now - last >= this.config.TASK_IDLE_TIMEOUT_MS) {
        this.logger.warn(
          { deviceId: a.session.id, task: a.address, silentMs: now - last },
          'device silent about its task: dropped',
        );
        void this.finalizer.end(a, { kind: 'dropped', reason: 'device_timeout', stop: true });
      }
    }
  }

  onAnnounced(session: DeviceSession): void {
    if (session.ready) {
      this.assigner.offer(session);
    } else {
      this.assigner.withdraw(session);
    }
  }

  onGone(session: DeviceSession): void {
    this.assigner.withdraw(session);
    const loan = this.book.loanOf(session);
    if (loan) {
      this.endLoan(loan, 'device_disconnected');
    }
    for (const assignment of [...this.book.heldBy(session)]) {
      void this.finalizer.end(assignment, { kind: 'dropped', reason: 'device_disconnected' });
    }
  }

  /**
   * The loan an event of a lent device is about, in sequence (null: out of sequence, struck);
   * undefined when the event is not about a loan's task.
   */
  private lent(session: DeviceSession, address: string, seq: number): Loan | null | undefined {
    const loan = this.book.loanOf(session);
    if (!loan || loan.ended || loan.address !== address) {
      return undefined;
    }
    if (!loan.tracker.takeSeq(seq)) {
      this.gateway.strike(session, 'out_of_order');
      return null;
    }
    return loan;
  }

  /** A loan ends without the device's own ending: the borrower hears why. */
  private endLoan(loan: Loan, reason: LoanLoss): void {
    if (loan.ended) {
      return;
    }
    this.book.endLoan(loan);
    loan.listener.lost(reason);
  }

  /** The assignment an event of the device is about, if it is the device's own and in sequence. */
  private own(session: DeviceSession, address: string, seq: number): Assignment | null {
    const assignment = this.book.held(session, address);
    if (!assignment || assignment.ended) {
      // Events of the task it held last crossed its ending on the wire (a cancel, a timeout): dropped.
      if (!this.book.heldLast(session, address)) {
        this.gateway.strike(session, 'foreign_task');
      }
      return null;
    }
    if (!assignment.tracker.takeSeq(seq)) {
      this.gateway.strike(session, 'out_of_order');
      return null;
    }
    return assignment;
  }

  onDelta(session: DeviceSession, payload: DeltaPayload): void {
    const loan = this.lent(session, payload.task_address, payload.seq);
    if (loan !== undefined) {
      if (loan && loan.tracker.output(payload.choices)) {
        loan.listener.delta(payload);
      } else if (loan) {
        session.send('task:cancel', { task_address: loan.address });
        this.endLoan(loan, 'output_exceeded');
        this.gateway.strike(session, 'output_exceeded');
      }
      return;
    }
    const assignment = this.own(session, payload.task_address, payload.seq);
    if (!assignment) {
      return;
    }
    if (assignment.tracker.output(payload.choices)) {
      assignment.relay({ type: 'delta', choices: payload.choices });
      return;
    }
    // More than the request allows: nothing more is relayed, and the device is stopped. Without this, a
    // device could stream until MAX_STREAM_MS at its full byte budget, into Redis and the client.
    const { tokens, wireBytes, limit } = assignment.tracker;
    this.logger.warn(
      { deviceId: session.id, task: assignment.address, tokens, bytes: wireBytes, limit },
      'task failed: its device sent more output than the request allows',
    );
    void this.finalizer.end(assignment, {
      kind: 'failed',
      code: 'device_output_exceeded',
      message:
        'The device serving this request sent more output than the request allows (max_tokens × n); the request was stopped.',
      stop: true,
    });
    // After the ending: a strike that disconnects the device must not turn this failure into a drop
    // (which would put the task back in the queue, for the same device once it returns).
    this.gateway.strike(session, 'output_exceeded');
  }

  /**
   * Vectors of an embedding task: checked and held until its `done` (see EmbedCollector). Vectors for
   * a chat task, or that the task's inputs cannot have, fail the assignment as an invalid event would;
   * the batch then goes to another device.
   */
  onEmbedding(session: DeviceSession, payload: EmbeddingPayload): void {
    const loan = this.lent(session, payload.task_address, payload.seq);
    if (loan !== undefined) {
      // A lent device runs a canary, a chat prompt.
      if (loan) {
        this.onInvalidEvent(session, payload.task_address, 'vectors for a chat task');
      }
      return;
    }
    const assignment = this.own(session, payload.task_address, payload.seq);
    if (!assignment) {
      return;
    }
    const refusal = assignment.collector ? assignment.collector.add(payload.data) : 'vectors for a chat task';
    if (refusal !== null) {
      this.refuseOutput(session, payload.task_address, refusal);
    }
  }

  onDone(session: DeviceSession, payload: DonePayload): void {
    const loan = this.lent(session, payload.task_address, payload.seq);
    if (loan !== undefined) {
      if (loan) {
        this.book.endLoan(loan);
        loan.listener.done(payload);
      }
      return;
    }
    const assignment = this.own(session, payload.task_address, payload.seq);
    if (!assignment) {
      return;
    }
    const collector = assignment.collector;
    // A chat answer has a finish reason per choice; an embedding has a vector per input, and none.
    const invalid = collector
      ? !collector.complete
        ? `done with ${collector.missing} of ${collector.inputs} vectors missing`
        : payload.finish_reasons.length > 0
          ? 'finish reasons for an embedding'
          : null
      : payload.finish_reasons.length === 0
        ? 'done without a finish reason'
        : null;
    if (invalid !== null) {
      this.refuseOutput(session, payload.task_address, invalid);
      return;
    }
    void this.finalizer.end(assignment, {
      kind: 'completed',
      finishReasons: payload.finish_reasons,
      usage: payload.usage,
    });
  }

  onError(session: DeviceSession, payload: TaskErrorPayload): void {
    const loan = this.lent(session, payload.task_address, payload.seq);
    if (loan !== undefined) {
      if (loan) {
        this.book.endLoan(loan);
        loan.listener.error(payload);
      }
      return;
    }
    const assignment = this.own(session, payload.task_address, payload.seq);
    if (assignment) {
      void this.finalizer.end(assignment, {
        kind: 'failed',
        code: clientCodeOf(payload.code),
        message: deviceMessage(payload.message),
        stop: false,
        resumable: RESUMABLE_DEVICE_ERRORS.has(payload.code),
      });
    }
  }

  /**
   * A well-formed event whose content the task cannot have (vectors it has no input for, an ending
   * with some missing): it fails the task as a malformed one does, and counts against the device.
   */
  private refuseOutput(session: DeviceSession, taskAddress: string, reason: string): void {
    this.logger.warn({ deviceId: session.id, task: taskAddress, reason }, 'invalid output from device');
    this.onInvalidEvent(session, taskAddress, reason);
    // After the ending: a strike that disconnects the device must not turn this failure into a drop.
    this.gateway.strike(session, 'invalid_output');
  }

  /** A malformed event about the device's own task: its output can no longer be trusted. */
  onInvalidEvent(session: DeviceSession, taskAddress: string, reason: string): void {
    const loan = this.book.loanOf(session);
    if (loan && loan.address === taskAddress) {
      session.send('task:cancel', { task_address: loan.address });
      this.endLoan(loan, 'invalid_event');
      return;
    }
    const assignment = this.book.held(session, taskAddress);
    if (assignment) {
      this.logger.warn(
        { deviceId: session.id, task: taskAddress, reason },
        'task failed: invalid event from its device',
      );
      void this.finalizer.end(assignment, {
        kind: 'failed',
        code: 'device_protocol_error',
        message: 'The device serving this request sent an invalid event.',
        stop: true,
      });
    }
  }

  /** Tasks whose api instance died: nobody reads their answer, so their devices stop. */
  private async stopOrphans(): Promise<void> {
    const byApi = new Map<string, Assignment[]>();
    for (const a of this.book.all()) {
      const list = byApi.get(a.job.data.apiInstance) ?? [];
      list.push(a);
      byApi.set(a.job.data.apiInstance, list);
    }
    const dead = await this.instance.dead('api', [...byApi.keys()]);
    for (const [api, assignments] of byApi) {
      if (dead.has(api)) {
        this.logger.warn({ api, tasks: assignments.length }, 'an api instance died: stopping its tasks');
        assignments.forEach((a) => void this.finalizer.end(a, { kind: 'cancelled' }));
      }
    }
  }

  /**
   * Shutdown: fetch nothing more, give the tasks in progress SHUTDOWN_GRACE_MS to finish, then treat
   * their devices as gone (requeued when nothing was sent yet, else an explicit error).
   */
  async drain(): Promise<void> {
    this.assigner.stop();
    // The dispatcher's own tasks do not hold up its shutdown.
    for (const loan of [...this.book.allLoans()]) {
      loan.session.send('task:cancel', { task_address: loan.address });
      this.endLoan(loan, 'dispatcher_shutdown');
    }
    const deadline = Date.now() + this.config.SHUTDOWN_GRACE_MS;
    while (this.book.size > 0 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
    }
    for (const a of [...this.book.all()]) {
      a.session.send('task:cancel', { task_address: a.address });
      void this.finalizer.end(a, { kind: 'dropped', reason: 'dispatcher_shutdown' });
    }
    // The endings just decided must reach the api before the process goes.
    await this.writers.flush(5_000);
  }
}
