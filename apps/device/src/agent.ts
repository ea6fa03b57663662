import { performance } from 'node:perf_hooks';
import { io } from 'socket.io-client';
import type { ManagerOptions, Socket, SocketOptions } from 'socket.io-client';
import type { Logger } from '@app/common/logging/logger';
import type { ChatMessage, ChatParams, ChoiceDelta, FinishReason, ToolCall, Usage } from '@app/common/protocol/chat';
import { requiredFeatures } from '@app/common/protocol/chat';
import type {
  AnnouncePayload,
  AssignAck,
  AssignPayload,
  DeviceErrorCode,
  DeviceHandshakeAuth,
  DeviceToServerEvents,
  ServerToDeviceEvents,
} from '@app/common/protocol/device-protocol';
import {
  DEVICE_ERROR_CODES,
  DEVICE_NAMESPACE,
  HANDSHAKE_ERRORS,
  PROTOCOL_VERSION,
  assignSchema,
} from '@app/common/protocol/device-protocol';
import type { Backend } from './backends/backend';
import { isCancellation } from './backends/backend';
import { AGENT_VERSION } from './version';

/** The message of the dispatcher's handshake refusal for an unknown or revoked token; retrying cannot help. */
export const TOKEN_REFUSED = HANDSHAKE_ERRORS.token;

// Reconnection: start fast (a dispatcher restart takes seconds), back off to 10 s so that a long outage
// costs little, and spread devices with ±50 % jitter so that they do not all return at the same instant.
const RECONNECT_DELAY_MS = 500;
const RECONNECT_DELAY_MAX_MS = 10_000;
const RANDOMIZATION_FACTOR = 0.5;
/**
 * A connection that lasted this long was healthy, so the next reconnection starts fast again. Shorter
 * ones keep backing off: two agents started with the same token each make the dispatcher drop the
 * other's connection, and must not flap at full speed.
 */
const STABLE_CONNECTION_MS = 30_000;
/** A dispatcher that has not answered an announce in this long is slow or gone; the ack is only logged. */
const ANNOUNCE_ACK_TIMEOUT_MS = 10_000;
/** Upper bound on waiting for the dispatcher to take the last events before the process exits anyway. */
const FLUSH_TIMEOUT_MS = 3_000;
/** The protocol bounds an error message to 2000 characters. */
const MAX_ERROR_MESSAGE = 2_000;

export interface AgentConfig {
  /** Dispatcher base URL (origin), e.g. http://127.0.0.1:8081. */
  server: string;
  token: string;
  backend: Backend;
  logger: Logger;
  /** Whether the per-task log line may carry the prompt and the completion. */
  logContent: boolean;
  /** Called once when the agent has stopped for good: 0 after a shutdown, 1 when the token was refused. */
  onExit(code: number): void;
  /** Overrides of the socket.io client options (tests shorten the reconnection delays). */
  socketOptions?: Partial<ManagerOptions & SocketOptions>;
}

type Outcome = 'completed' | 'failed' | 'cancelled' | 'disconnected' | 'shutdown';

/** `running` takes tasks; `draining` finishes its task and takes no more; `stopped` is on its way out. */
type Phase = 'running' | 'draining' | 'stopped';

interface RunningTask {
  address: string;
  model: string;
  attempt: number;
  /** The api's request id, so that one id follows the request through every log. */
  requestId: string | null;
  controller: AbortController;
  /** Next sequence number: 0 for the first event of the task, one more per event. */
  seq: number;
  startedAt: number;
  firstDeltaAt: number | null;
  deltas: number;
  /** Kept only with --log-content. */
  prompt?: ChatMessage[];
  output?: { content: string; reasoning: string; tool_calls: ToolCall[] }[];
}

/** Exponential backoff with jitter, the same curve as socket.io's own reconnection. */
export function backoffDelay(attempt: number, random: () => number = Math.random): number {
  const base = Math.min(RECONNECT_DELAY_MAX_MS, RECONNECT_DELAY_MS * 2 ** Math.min(attempt, 30));
  const jittered = base + base * RANDOMIZATION_FACTOR * (random() * 2 - 1);
  return Math.round(Math.min(RECONNECT_DELAY_MAX_MS, Math.max(0, jittered)));
}

/** The protocol's error code for whatever a backend threw (`backend_error` when it has none of them). */
function errorCode(error: unknown): DeviceErrorCode {
  const code = (error as { code?: unknown } | null)?.code;
  return (DEVICE_ERROR_CODES as readonly unknown[]).includes(code) ? (code as DeviceErrorCode) : 'backend_error';
}

function errorMessage(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  return (message || 'the backend failed').slice(0, MAX_ERROR_MESSAGE);
}

/**
 * The device agent: one socket.io connection to a dispatcher, one task at a time. Task events are only
 * ever sent on the connection the task was assigned on; a disconnect ends the task, and the dispatcher
 * decides what becomes of it.
 */
export class DeviceAgent {
  private readonly socket: Socket<ServerToDeviceEvents, DeviceToServerEvents>;
  private readonly log: Logger;
  private current: RunningTask | null = null;
  private phase: Phase = 'running';
  /** Reconnections the agent starts itself (socket.io does not retry after a refusal or a server-side disconnect). */
  private manualAttempts = 0;
  private retryTimer: NodeJS.Timeout | undefined;
  private connectedAt = 0;
  private exitCode = 0;
  private exitTimer: NodeJS.Timeout | undefined;
  private exited = false;

  constructor(private readonly config: AgentConfig) {
    this.log = config.logger;
    const auth: DeviceHandshakeAuth = { token: config.token, protocol: PROTOCOL_VERSION };
    this.socket = io(`${config.server}${DEVICE_NAMESPACE}`, {
      // WebSocket only: long polling would need sticky sessions in front of several dispatchers.
      transports: ['websocket'],
      auth: { ...auth },
      autoConnect: false,
      // Each agent its own connection, even to a URL another agent in this process uses (tests do).
      forceNew: true,
      reconnection: true,
      reconnectionAttempts: Infinity,
      reconnectionDelay: RECONNECT_DELAY_MS,
      reconnectionDelayMax: RECONNECT_DELAY_MAX_MS,
      randomizationFactor: RANDOMIZATION_FACTOR,
      ...config.socketOptions,
    });
    this.socket.on('connect', () => this.onConnect());
    this.socket.on('connect_error', (error) => this.onConnectError(error));
    this.socket.on('disconnect', (reason) => this.onDisconnect(reason));
    this.socket.on('task:assign', (payload, ack) => this.onAssign(payload, ack));
    this.socket.on('task:cancel', (payload) => this.onCancel(payload));
    this.socket.io.on('reconnect_attempt', (attempt) => this.log.debug({ attempt }, 'reconnecting'));
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
            server: this.config.server,
            backend: backend.name,
            models: backend.models(),
            features: backend.features,
            available: backend.available(),
            agent_version: AGENT_VERSION,
          },
          'connecting to dispatcher',
        );
        this.socket.connect();
      });
  }

  /** The backend's models, features or availability changed: tell the dispatcher. */
  private onBackendChange(): void {
    if (this.phase === 'stopped') {
      return;
    }
    const backend = this.config.backend;
    this.log.info(
      { models: backend.models(), features: backend.features, available: backend.available() },
      'backend changed',
    );
    this.announce();
  }

  /**
   * SIGINT/SIGTERM. The first: announce unavailable, finish the current task, then exit 0. The second:
   * end the current task with `device_shutdown` and exit 0 at once.
   */
  shutdown(signal: string): void {
    if (this.phase === 'stopped') {
      // A third signal while the last events are being flushed: stop waiting.
      this.finish();
      return;
    }
    if (this.phase === 'running') {
      this.phase = 'draining';
      if (!this.current) {
        this.log.info({ signal }, 'shutting down');
        this.stop(0);
        return;
      }
      this.log.info(
        { signal, task_address: this.current.address },
        'shutting down after the current task; signal again to cancel it',
      );
      this.announce();
      return;
    }
    const task = this.current;
    this.log.info({ signal, task_address: task?.address ?? null }, 'shutting down now');
    if (task) {
      if (this.canEmit(task)) {
        this.socket.emit('task:error', {
          task_address: task.address,
          seq: task.seq++,
          code: 'device_shutdown',
          message: 'the device is shutting down',
        });
      }
      this.endTask(task, 'shutdown', { error_code: 'device_shutdown' });
    }
    this.stop(0);
  }

  private onConnect(): void {
    this.connectedAt = performance.now();
    this.log.info({ socket_id: this.socket.id }, 'connected to dispatcher');
    this.announce();
  }

  /** Sends the current state; `settled` runs once the dispatcher answered or did not in time. */
  private announce(settled?: () => void, timeoutMs = ANNOUNCE_ACK_TIMEOUT_MS): void {
    if (!this.socket.connected) {
      // The next connect announces the state of that moment.
      settled?.();
      return;
    }
    const payload: AnnouncePayload = {
      agent_version: AGENT_VERSION,
      backend: this.config.backend.name,
      models: this.config.backend.models(),
      features: this.config.backend.features,
      // Draining, or a runtime that does not answer: the dispatcher assigns nothing (it withdraws the presence).
      available: this.phase === 'running' && this.config.backend.available(),
      running_task: this.current?.address ?? null,
    };
    this.socket.timeout(timeoutMs).emit('announce', payload, (error, answer) => {
      settled?.();
      if (error) {
        this.log.warn({ available: payload.available }, 'announce not acknowledged');
      } else if (answer.ok) {
        this.log.info(
          { device_id: answer.device_id, pool: answer.pool, models: answer.models, available: payload.available },
          'announced to dispatcher',
        );
        if (answer.refused.length > 0) {
          this.log.warn({ refused: answer.refused }, 'the dispatcher will not give this device tasks for some models');
        }
      } else {
        this.log.error({ error: answer.error }, 'dispatcher refused the announce');
      }
    });
  }

  private onConnectError(error: Error): void {
    if (this.phase === 'stopped') {
      return;
    }
    if (error.message === TOKEN_REFUSED) {
      this.log.error('device token refused');
      this.stop(1);
      return;
    }
    if (error.message.startsWith(HANDSHAKE_ERRORS.protocol)) {
      // Retrying cannot help: this agent speaks another version of the protocol than the dispatcher.
      this.log.error({ error: error.message, protocol: PROTOCOL_VERSION }, 'dispatcher refused this agent version');
      this.stop(1);
      return;
    }
    if (this.socket.active) {
      // A network-level failure: socket.io retries on its own.
      this.log.warn({ error: error.message }, 'cannot reach dispatcher; retrying');
      return;
    }
    // The dispatcher answered but refused the handshake for another reason; socket.io leaves retrying to us.
    this.log.warn({ error: error.message }, 'dispatcher refused the connection; retrying');
    this.scheduleReconnect();
  }

  private onDisconnect(reason: string): void {
    // socket.io-client keeps what was emitted while the connection was failing and sends it after the
    // next connect; events of a task that ended with the old connection must not reach the new one.
    this.socket.sendBuffer = [];
    if (this.phase === 'stopped') {
      return;
    }
    this.log.warn({ reason }, 'disconnected from dispatcher');
    if (performance.now() - this.connectedAt >= STABLE_CONNECTION_MS) {
      this.manualAttempts = 0;
    }
    const task = this.current;
    if (task) {
      // The dispatcher treats the task as dropped with this connection (it re-queues or fails it).
      this.endTask(task, 'disconnected');
    }
    if (this.phase !== 'running') {
      this.stop(0);
      return;
    }
    if (reason === 'io server disconnect') {
      // socket.io does not reconnect after a server-side disconnect; a revoked token is then refused at
      // the handshake and ends the agent, anything else (an inactivity cut-off, a restart) heals.
      this.scheduleReconnect();
    }
  }

  private scheduleReconnect(): void {
    clearTimeout(this.retryTimer);
    const delay = backoffDelay(this.manualAttempts++);
    this.retryTimer = setTimeout(() => {
      if (this.phase !== 'stopped' && !this.socket.connected) {
        this.socket.connect();
      }
    }, delay);
  }

  private onAssign(payload: AssignPayload, ack: (answer: AssignAck) => void): void {
    if (typeof ack !== 'function') {
      this.log.warn('task:assign without an acknowledgement callback; ignored');
      return;
    }
    const refuse = (reason: string, detail?: Record<string, unknown>) => {
      this.log.warn(
        { task_address: (payload as Partial<AssignPayload> | null)?.task_address, reason, ...detail },
        'assignment refused',
      );
      ack({ accepted: false, reason });
    };
    if (this.phase !== 'running') {
      refuse('shutting_down');
      return;
    }
    if (this.current) {
      refuse('busy', { running_task: this.current.address });
      return;
    }
    if (!this.config.backend.available()) {
      // An assignment that crossed the announce saying so; another device can take it.
      refuse('upstream_unavailable');
      return;
    }
    const parsed = assignSchema.safeParse(payload);
    if (!parsed.success) {
      refuse('invalid_assignment', { problem: parsed.error.issues[0]?.message });
      return;
    }
    if (!this.config.backend.models().includes(payload.model)) {
      refuse('model_not_served', { model: payload.model });
      return;
    }
    const missing = requiredFeatures(payload.params, false).filter((f) => !this.config.backend.features.includes(f));
    if (missing.length > 0) {
      // Answering without the feature would be a wrong answer that looks right; the dispatcher can try elsewhere.
      refuse('unsupported_feature', { features: missing });
      return;
    }

    const task: RunningTask = {
      address: payload.task_address,
      model: payload.model,
      attempt: payload.attempt,
      requestId: payload.request_id ?? null,
      controller: new AbortController(),
      seq: 0,
      startedAt: performance.now(),
      firstDeltaAt: null,
      deltas: 0,
    };
    if (this.config.logContent) {
      task.prompt = payload.params.messages;
      task.output = [];
    }
    this.current = task;
    ack({ accepted: true });
    void this.runTask(task, payload.params);
  }

  private onCancel(payload: { task_address?: unknown } | null): void {
    const task = this.current;
    if (!task || payload?.task_address !== task.address) {
      // Usually a cancel that crossed the task's last event on the wire.
      this.log.debug({ task_address: payload?.task_address }, 'cancel for a task not running; ignored');
      return;
    }
    // Free at once: the backend's late rejection is ignored, and nothing more is sent for this task.
    this.endTask(task, 'cancelled');
  }

  private async runTask(task: RunningTask, params: ChatParams): Promise<void> {
    const sink = { delta: (choices: ChoiceDelta[]) => this.onDelta(task, choices) };
    try {
      const result = await this.config.backend.run({ model: task.model, params }, sink, task.controller.signal);
      if (this.current !== task) {
        return;
      }
      if (result.finish_reasons.length === 0) {
        throw new Error('the backend reported no finish reason');
      }
      if (this.canEmit(task)) {
        this.socket.emit('task:done', {
          task_address: task.address,
          seq: task.seq++,
          finish_reasons: result.finish_reasons,
          usage: result.usage,
        });
      }
      this.endTask(task, 'completed', { finish_reasons: result.finish_reasons, usage: result.usage });
    } catch (error) {
      if (this.current !== task) {
        // Cancelled, disconnected or shut down: already logged, and nothing more may be sent.
        return;
      }
      const code = errorCode(error);
      if (this.canEmit(task)) {
        this.socket.emit('task:error', {
          task_address: task.address,
          seq: task.seq++,
          code,
          message: errorMessage(error),
        });
      }
      this.endTask(task, isCancellation(error) ? 'cancelled' : 'failed', { error_code: code });
    }
  }

  private onDelta(task: RunningTask, choices: ChoiceDelta[]): void {
    if (this.current !== task || task.controller.signal.aborted || choices.length === 0) {
      return;
    }
    task.firstDeltaAt ??= performance.now();
    task.deltas++;
    if (task.output) {
      for (const choice of choices) {
        const out = (task.output[choice.index] ??= { content: '', reasoning: '', tool_calls: [] });
        out.content += choice.content ?? '';
        out.reasoning += choice.reasoning ?? '';
        out.tool_calls.push(...(choice.tool_calls ?? []));
      }
    }
    if (this.canEmit(task)) {
      this.socket.emit('task:delta', { task_address: task.address, seq: task.seq++, choices });
    }
  }

  /** Task events go out only for the current task and only on a live connection (never into socket.io's replay buffer). */
  private canEmit(task: RunningTask): boolean {
    return this.current === task && this.socket.connected;
  }

  /** Ends the current task: stops its backend, frees the agent, writes the task's one log line. */
  private endTask(
    task: RunningTask,
    outcome: Outcome,
    extra: { finish_reasons?: FinishReason[]; usage?: Usage | null; error_code?: string } = {},
  ): void {
    if (this.current !== task) {
      return;
    }
    this.current = null;
    task.controller.abort();
    const now = performance.now();
    const ms = (x: number) => Math.round(x * 10) / 10;
    this.log.info(
      {
        task_address: task.address,
        request_id: task.requestId,
        model: task.model,
        attempt: task.attempt,
        outcome,
        finish_reasons: extra.finish_reasons,
        error_code: extra.error_code,
        prompt_tokens: extra.usage?.prompt_tokens,
        completion_tokens: extra.usage?.completion_tokens ?? null,
        deltas: task.deltas,
        ttft_ms: task.firstDeltaAt === null ? null : ms(task.firstDeltaAt - task.startedAt),
        total_ms: ms(now - task.startedAt),
        ...(task.output ? { prompt: task.prompt, completion: task.output } : {}),
      },
      'task finished',
    );
    if (this.phase === 'draining') {
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
    clearTimeout(this.retryTimer);
    this.config.backend.stop();
    this.exitTimer = setTimeout(() => this.finish(), FLUSH_TIMEOUT_MS);
    // socket.io's server dispatches each received event on the next tick and drops it if the namespace
    // disconnect arrived in between, so disconnecting right after task:done can lose it. The announce
    // ack is a barrier: the server answers it only after dispatching every event sent before it.
    this.announce(() => this.close(), FLUSH_TIMEOUT_MS);
  }

  private close(): void {
    const engine = this.socket.io.engine;
    if (this.socket.connected && engine) {
      engine.once('close', () => this.finish());
    } else {
      setImmediate(() => this.finish());
    }
    this.socket.disconnect();
  }

  private finish(): void {
    if (!this.exited) {
      this.exited = true;
      clearTimeout(this.exitTimer);
      this.config.onExit(this.exitCode);
    }
  }
}
