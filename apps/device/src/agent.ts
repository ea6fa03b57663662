import type { Logger } from '@app/common/logging/logger';
import type { ChatParams, ChoiceDelta } from '@app/common/protocol/chat';
import type { EmbedParams } from '@app/common/protocol/embeddings';
import type {
  AssignAck,
  AssignPayload,
  CancelPayload,
  DeviceToServerEvents,
} from '@app/common/protocol/device-protocol';
import { HANDSHAKE_ERRORS } from '@app/common/protocol/device-protocol';
import type { AgentConfig } from './agent-config';
import { isCancellation } from './backends/backend';
import { announcedFeatures, announcePayload } from './link/announced-identities';
import { DispatcherLink } from './link/dispatcher-link';
import type { TaskEvent } from './link/dispatcher-link';
import { refusalOf } from './task/assignment-check';
import { errorCode, errorMessage } from './task/backend-errors';
import { embeddingEvents, embeddingUsage, vectorsProblem } from './task/embedding-events';
import { RunningTask } from './task/running-task';
import type { Outcome, TaskEnding } from './task/running-task';
import { AGENT_VERSION } from './version';

export type { AgentConfig } from './agent-config';
export { backoffDelay } from './link/backoff';

/** The message of the dispatcher's handshake refusal for an unknown or revoked token; retrying cannot help. */
export const TOKEN_REFUSED = HANDSHAKE_ERRORS.token;

/** A dispatcher that has not answered an announce in this long is slow or gone; the ack is only logged. */
const ANNOUNCE_ACK_TIMEOUT_MS = 10_000;
/** Upper bound on waiting for the dispatcher to take the last events before the process exits anyway. */
const FLUSH_TIMEOUT_MS = 3_000;

/** `running` takes tasks; `draining` finishes the tasks it holds and takes no more; `stopped` is on its way out. */
type Phase = 'running' | 'draining' | 'stopped';

/**
 * The device agent: one socket.io connection to a dispatcher, one task at a time, or two embedding
 * tasks (`embed_prefetch`: the runtime gets the next batch while the agent still sends the vectors of
 * the one before). Task events are only ever sent on the connection the task was assigned on; a
 * disconnect ends the tasks, and the dispatcher decides what becomes of them.
 */
export class DeviceAgent {
  private readonly link: DispatcherLink;
  private readonly log: Logger;
  /**
   * The tasks the agent holds, oldest first: none, one, or two embedding tasks. A task that ended is
   * no longer here, and nothing more is sent for it: every step of a task checks {@link holds} first.
   */
  private readonly held: RunningTask[] = [];
  private phase: Phase = 'running';
  /** How many identities the last announce left out (its warning is logged when this changes). */
  private droppedIdentities = 0;
  private exitCode = 0;
  private exitTimer: NodeJS.Timeout | undefined;
  private exited = false;

  constructor(private readonly config: AgentConfig) {
    this.log = config.logger;
    this.link = new DispatcherLink(
      { servers: config.servers, token: config.token, logger: config.logger, socketOptions: config.socketOptions },
      {
        connected: () => this.announce(),
        disconnected: () => this.onDisconnect(),
        refused: (why) => this.onRefused(why),
        assign: (payload, ack) => this.onAssign(payload, ack),
        cancel: (payload) => this.onCancel(payload),
      },
    );
  }

  /**
   * Starts watching the backend (its first model list and health probe), then connects, so that the
   * first announce already says what the device serves and whether its runtime answers.
   */
  start(): void {
    const backend = this.config.backend;
    void backend
      .start(() => this.onBackendChange())
      .catch((error: unknown) => this.log.error({ error: errorMessage(error) }, 'backend failed to start'))
      .finally(() => {
        if (this.phase === 'stopped') {
          return;
        }
        this.log.info(
          {
            servers: this.config.servers,
            backend: backend.name,
            models: backend.models(),
            features: announcedFeatures(backend.features),
            available: backend.available(),
            agent_version: AGENT_VERSION,
          },
          'connecting to dispatcher',
        );
        this.link.open();
      });
  }

  /** The backend's models, features or availability changed: tell the dispatcher. */
  private onBackendChange(): void {
    if (this.phase === 'stopped') {
      return;
    }
    const backend = this.config.backend;
    this.log.info(
      { models: backend.models(), features: announcedFeatures(backend.features), available: backend.available() },
      'backend changed',
    );
    this.announce();
  }

  /**
   * SIGINT/SIGTERM. The first: announce unavailable, finish the tasks held, then exit 0. The second:
   * end them with `device_shutdown` and exit 0 at once.
   */
  shutdown(signal: string): void {
    if (this.phase === 'stopped') {
      // A third signal while the last events are being flushed: stop waiting.
      this.finish();
      return;
    }
    if (this.phase === 'running') {
      this.phase = 'draining';
      if (this.held.length === 0) {
        this.log.info({ signal }, 'shutting down');
        this.stop(0);
        return;
      }
      // The same line as before two embedding tasks could be held (operators search for it), with every address.
      this.log.info(
        { signal, task_address: this.held[0].address, task_addresses: this.held.map((t) => t.address) },
        this.held.length === 1
          ? 'shutting down after the current task; signal again to cancel it'
          : 'shutting down after the current tasks; signal again to cancel them',
      );
      this.announce();
      return;
    }
    const tasks = [...this.held];
    this.log.info({ signal, task_addresses: tasks.map((t) => t.address) }, 'shutting down now');
    for (const task of tasks) {
      this.send(task, 'task:error', {
        task_address: task.address,
        seq: task.seq,
        code: 'device_shutdown',
        message: 'the device is shutting down',
      });
      this.endTask(task, 'shutdown', { error_code: 'device_shutdown' });
    }
    this.stop(0);
  }

  /** Sends the current state; `settled` runs once the dispatcher answered or did not in time. */
  private announce(settled?: () => void, timeoutMs = ANNOUNCE_ACK_TIMEOUT_MS): void {
    const { payload, dropped } = announcePayload(this.config.backend, {
      // Draining, or a runtime that does not answer: the dispatcher assigns nothing (it withdraws the presence).
      available: this.phase === 'running' && this.config.backend.available(),
      // One address only (the field predates embed_prefetch): with two embedding tasks held, the older.
      runningTask: this.held[0]?.address ?? null,
    });
    // What the runtime says of its models beyond the announce's budget is left out: logged once per count.
    if (dropped !== this.droppedIdentities) {
      this.droppedIdentities = dropped;
      if (dropped > 0) {
        this.log.warn(
          { dropped, announced: payload.identities.length },
          'too many model identities for one announce: those left out are announced as saying nothing (no digest)',
        );
      }
    }
    // Without a connection the link settles at once: the next connect announces the state of that moment.
    this.link.announce(payload, timeoutMs, () => settled?.());
  }

  private onRefused(why: 'token' | 'protocol'): void {
    if (this.phase === 'stopped') {
      return;
    }
    if (why === 'token') {
      this.log.error('device token refused');
    }
    // Retrying cannot help: the token is unknown or revoked, or this agent speaks another protocol version.
    this.stop(1);
  }

  private onDisconnect(): void {
    if (this.phase === 'stopped') {
      return;
    }
    // The dispatcher drops the tasks with this connection (re-queues or fails them); their upstream requests stop.
    for (const task of [...this.held]) {
      this.endTask(task, 'disconnected');
    }
    if (this.phase !== 'running') {
      this.stop(0);
    }
  }

  /** A valid assignment (the link checked it against the catalog). */
  private onAssign(payload: AssignPayload, ack: (answer: AssignAck) => void): void {
    const refusal = refusalOf(payload, {
      running: this.phase === 'running',
      held: this.held,
      backend: this.config.backend,
    });
    if (refusal) {
      this.log.warn(
        { task_address: payload.task_address, reason: refusal.reason, ...refusal.detail },
        'assignment refused',
      );
      ack({ accepted: false, reason: refusal.reason });
      return;
    }
    const task = new RunningTask(payload, this.link.connection, this.config.logContent);
    // A second embedding task's runtime call starts now, beside the first one's: the runtime queues or
    // batches it, and has it the moment it is done with the first, while the agent sends those vectors.
    this.held.push(task);
    if (payload.kind === 'embed') {
      void this.runEmbed(task, payload.embed);
    } else {
      void this.runTask(task, payload.params);
    }
    // The runtime's request first (Node writes it on the next tick, on its pooled connection), the ack
    // after it; the dispatcher takes the task's events and the ack in either order.
    process.nextTick(ack, { accepted: true });
  }

  private onCancel(payload: CancelPayload): void {
    const task = this.held.find((t) => t.address === payload.task_address);
    if (!task) {
      // Usually a cancel that crossed the task's last event on the wire.
      this.log.debug({ task_address: payload.task_address }, 'cancel for a task not running; ignored');
      return;
    }
    // Free at once: the backend's late rejection is ignored, and nothing more is sent for this task; the
    // other task held, if any, goes on.
    this.endTask(task, 'cancelled');
  }

  private async runTask(task: RunningTask, params: ChatParams): Promise<void> {
    const sink = { delta: (choices: ChoiceDelta[]) => this.onDelta(task, choices) };
    try {
      const result = await this.config.backend.run(
        { model: task.model, params, traceparent: task.traceparent },
        sink,
        task.signal,
      );
      task.settle();
      if (!this.holds(task)) {
        return;
      }
      if (result.finish_reasons.length === 0) {
        throw new Error('the backend reported no finish reason');
      }
      this.send(task, 'task:done', {
        task_address: task.address,
        seq: task.seq,
        finish_reasons: result.finish_reasons,
        usage: result.usage,
      });
      this.endTask(task, 'completed', { finish_reasons: result.finish_reasons, usage: result.usage });
    } catch (error) {
      task.settle();
      if (!this.holds(task)) {
        // Cancelled, disconnected or shut down: already logged, and nothing more may be sent.
        return;
      }
      this.fail(task, error);
    }
  }

  /**
   * An embedding task: the runtime's vectors, then as many `task:embedding` events as their size takes
   * (see embedding-events.ts), then `task:done` without finish reasons. Between events the agent hands
   * the event loop back, so that a cancel, a disconnect or a signal ends the task between two of them.
   */
  private async runEmbed(task: RunningTask, params: EmbedParams): Promise<void> {
    try {
      const result = await this.config.backend.embed(
        { model: task.model, params, traceparent: task.traceparent },
        task.signal,
      );
      task.settle();
      if (!this.holds(task)) {
        return;
      }
      const problem = vectorsProblem(result.vectors, params.input.length);
      if (problem) {
        throw new Error(problem);
      }
      task.recordVectors(result.vectors[0].length);
      let first = true;
      for (const data of embeddingEvents(task.address, result.vectors)) {
        if (!first) {
          await new Promise<void>((resolve) => setImmediate(resolve));
        }
        first = false;
        if (!this.holds(task)) {
          return;
        }
        if (this.send(task, 'task:embedding', { task_address: task.address, seq: task.seq, data })) {
          task.recordEmbeddingEvent();
        }
      }
      const usage = embeddingUsage(result.promptTokens);
      this.send(task, 'task:done', { task_address: task.address, seq: task.seq, finish_reasons: [], usage });
      this.endTask(task, 'completed', { usage });
    } catch (error) {
      task.settle();
      if (!this.holds(task)) {
        return;
      }
      this.fail(task, error);
    }
  }

  /** Ends a task with the error its backend (or the agent's check of its output) threw. */
  private fail(task: RunningTask, error: unknown): void {
    const code = errorCode(error);
    this.send(task, 'task:error', { task_address: task.address, seq: task.seq, code, message: errorMessage(error) });
    this.endTask(task, isCancellation(error) ? 'cancelled' : 'failed', { error_code: code });
  }

  private onDelta(task: RunningTask, choices: ChoiceDelta[]): void {
    if (!this.holds(task) || task.signal.aborted || choices.length === 0) {
      return;
    }
    task.recordDelta(choices);
    this.send(task, 'task:delta', { task_address: task.address, seq: task.seq, choices });
  }

  /** Whether the task is still the agent's: not ended (completed, failed, cancelled, disconnected, shut down). */
  private holds(task: RunningTask): boolean {
    return this.held.includes(task);
  }

  /** A task's event goes out only while the agent holds it, on the connection it came on; each takes a sequence number. */
  private send<E extends TaskEvent>(
    task: RunningTask,
    event: E,
    payload: Parameters<DeviceToServerEvents[E]>[0],
  ): boolean {
    if (this.holds(task) && this.link.send(task.connection, event, payload)) {
      task.sent();
      return true;
    }
    return false;
  }

  /** Ends a task: stops its backend, lets it go, writes the task's one log line; a drain ends with the last. */
  private endTask(task: RunningTask, outcome: Outcome, extra: TaskEnding = {}): void {
    const index = this.held.indexOf(task);
    if (index < 0) {
      return;
    }
    this.held.splice(index, 1);
    task.stopBackend();
    task.endSpan(outcome, extra.error_code);
    this.log.info(task.logLine(outcome, extra), 'task finished');
    if (this.phase === 'draining' && this.held.length === 0) {
      this.stop(0);
    }
  }

  /** Leaves for good: makes sure the dispatcher has taken the last events, disconnects, reports the exit code. */
  private stop(code: number): void {
    if (this.phase === 'stopped') {
      return;
    }
    this.phase = 'stopped';
    this.exitCode = code;
    this.config.backend.stop();
    this.exitTimer = setTimeout(() => this.finish(), FLUSH_TIMEOUT_MS);
    // socket.io's server drops an event whose namespace disconnect came before its next-tick dispatch, so
    // right after task:done it could be lost; the announce ack is a barrier: it follows every event before it.
    this.announce(() => this.link.close(() => this.finish()), FLUSH_TIMEOUT_MS);
  }

  private finish(): void {
    if (!this.exited) {
      this.exited = true;
      clearTimeout(this.exitTimer);
      this.config.onExit(this.exitCode);
    }
  }
}
