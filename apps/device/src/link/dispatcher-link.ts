import { performance } from 'node:perf_hooks';
import { io } from 'socket.io-client';
import type { ManagerOptions, Socket, SocketOptions } from 'socket.io-client';
import type { Logger } from '@app/common/logging/logger';
import type {
  AckedEvent,
  AnnounceAck,
  AnnouncePayload,
  AssignAck,
  AssignPayload,
  CancelPayload,
  DeviceHandshakeAuth,
  DeviceToServerCatalog,
  DeviceToServerEvent,
  DeviceToServerEvents,
  MessageReceiver,
  ServerToDeviceCatalog,
  ServerToDeviceEvents,
} from '@app/common/protocol/device-protocol';
import {
  DEVICE_NAMESPACE,
  DEVICE_TO_SERVER,
  HANDSHAKE_ERRORS,
  PROTOCOL_VERSION,
  SERVER_TO_DEVICE,
  inboundOf,
  receiveMessage,
  schemaProblem,
} from '@app/common/protocol/device-protocol';
import { AnnouncePacer } from './announce-pacer';
import { backoffDelay, failoverDelay } from './backoff';
import { handshakeWait } from './handshake-wait';

/**
 * A connection that lasted this long was healthy, so the next reconnection starts fast again. Shorter
 * ones keep backing off: two agents started with the same token each make the dispatcher drop the
 * other's connection, and must not flap at full speed.
 */
const STABLE_CONNECTION_MS = 30_000;

type DeviceSocket = Socket<ServerToDeviceEvents, DeviceToServerEvents>;
/** What the agent sends without waiting for an answer: a task's events. */
export type TaskEvent = Exclude<DeviceToServerEvent, AckedEvent<DeviceToServerCatalog>>;

/** The agent speaks the current version only: what the dispatcher sends is read with the catalog as it is. */
const FROM_DISPATCHER = inboundOf(SERVER_TO_DEVICE);

/** What the link reports to the agent. */
export interface LinkHandlers {
  connected(): void;
  /** The connection is gone (the agent ends a running task: its events may only go on the connection it came on). */
  disconnected(reason: string): void;
  /** The dispatcher refused this agent for good (a refused token, another protocol version). */
  refused(why: 'token' | 'protocol'): void;
  assign(payload: AssignPayload, ack: (answer: AssignAck) => void): void;
  cancel(payload: CancelPayload): void;
}

export interface LinkConfig {
  /** Dispatcher base URLs (origins); the link keeps one connection, to the first of them that answers. */
  servers: string[];
  token: string;
  logger: Logger;
  /** Overrides of the socket.io client options. */
  socketOptions?: Partial<ManagerOptions & SocketOptions>;
}

/**
 * The agent's one connection to a dispatcher. Every retry is the link's own (socket.io's reconnection
 * is off), so that a dispatcher that died is left for the next URL of the list at once: each server not
 * yet tried since the last good connection is tried within a few hundred milliseconds, and only when
 * all of them failed does the link back off, up to 10 s. With one URL this is socket.io's own curve.
 * A handshake refused with a wait (a cooling-off, too many failed handshakes from this address) is
 * retried after that wait, on the same server: it holds on every dispatcher. Announces go out at most
 * one a second (AnnouncePacer), well within what the dispatcher allows.
 */
export class DispatcherLink {
  private socket: DeviceSocket | null = null;
  private index = 0;
  /** Servers tried since the last connection that came up. */
  private tried = 0;
  private attempts = 0;
  private connectedAt = 0;
  private retryTimer: NodeJS.Timeout | undefined;
  private closed = false;
  private pacer: AnnouncePacer<AnnouncePayload, AnnounceAck> | null = null;

  /**
   * What the agent does with each event the dispatcher may send, once it passed its schema: every event
   * of the catalog, or this does not compile. The context is the connection the event came on.
   */
  private readonly receiver: MessageReceiver<ServerToDeviceCatalog, DeviceSocket> = {
    handlers: {
      'task:assign': (_socket, payload, reply) => {
        if (!reply) {
          this.config.logger.warn(
            { task_address: payload.task_address },
            'task:assign without an acknowledgement; ignored',
          );
          return;
        }
        this.on.assign(payload, reply);
      },
      'task:cancel': (_socket, payload) => this.on.cancel(payload),
    },
    // Answered at once, so that the dispatcher gives the task to another device without waiting for a timeout.
    refusals: { 'task:assign': { accepted: false, reason: 'invalid_assignment' } },
  };

  constructor(
    private readonly config: LinkConfig,
    private readonly on: LinkHandlers,
  ) {
    if (config.servers.length === 0) {
      throw new Error('a device needs at least one dispatcher URL');
    }
  }

  get server(): string {
    return this.config.servers[this.index];
  }

  get connected(): boolean {
    return this.socket?.connected ?? false;
  }

  /** An id of the current connection: task events go out only on the connection their task came on. */
  get connection(): DeviceSocket | null {
    return this.socket?.connected ? this.socket : null;
  }

  open(): void {
    this.connect();
  }

  /**
   * Sends a task event on `connection` if it is still the live one (never into socket.io's replay
   * buffer, never to another dispatcher); says whether it went out.
   */
  send<E extends TaskEvent>(
    connection: DeviceSocket | null,
    event: E,
    payload: Parameters<DeviceToServerEvents[E]>[0],
  ): boolean {
    if (!connection || connection !== this.socket || !connection.connected) {
      return false;
    }
    (connection.emit as (event: E, payload: Parameters<DeviceToServerEvents[E]>[0]) => void)(event, payload);
    return true;
  }

  /**
   * Announces the device's state and logs the dispatcher's answer; `settled` runs once with the answer,
   * or with null when there is no connection or no answer in time.
   */
  announce(payload: AnnouncePayload, timeoutMs: number, settled: (answer: AnnounceAck | null) => void): void {
    if (!this.socket?.connected || !this.pacer) {
      settled(null);
      return;
    }
    this.pacer.announce(payload, timeoutMs, settled);
  }

  private sendAnnounce(
    socket: DeviceSocket,
    payload: AnnouncePayload,
    timeoutMs: number,
    settled: (answer: AnnounceAck | null) => void,
  ): void {
    if (socket !== this.socket || !socket.connected) {
      settled(null);
      return;
    }
    const log = this.config.logger;
    socket.timeout(timeoutMs).emit('announce', payload, (error, raw: unknown) => {
      if (error) {
        settled(null);
        log.warn({ available: payload.available }, 'announce not acknowledged');
        return;
      }
      // The dispatcher's answer is checked like anything it sends: one the agent cannot read counts as none.
      const parsed = DEVICE_TO_SERVER.announce.ack.safeParse(raw);
      if (!parsed.success) {
        settled(null);
        log.warn({ problem: schemaProblem(parsed.error) }, 'invalid announce acknowledgement from dispatcher; dropped');
        return;
      }
      const answer = parsed.data;
      settled(answer);
      if (answer.ok) {
        const { device_id, pool, models } = answer;
        log.info({ device_id, pool, models, available: payload.available }, 'announced to dispatcher');
        if (answer.refused.length > 0) {
          log.warn({ refused: answer.refused }, 'the dispatcher will not give this device tasks for some models');
        }
      } else {
        log.error({ error: answer.error }, 'dispatcher refused the announce');
      }
    });
  }

  /** Disconnects for good; `done` runs once the connection is closed (or at once when there is none). */
  close(done: () => void): void {
    this.closed = true;
    clearTimeout(this.retryTimer);
    this.pacer?.drop();
    const socket = this.socket;
    const engine = socket?.io.engine;
    if (socket?.connected && engine) {
      engine.once('close', done);
    } else {
      setImmediate(done);
    }
    socket?.disconnect();
  }

  private connect(): void {
    const previous = this.socket;
    if (previous) {
      previous.removeAllListeners();
      previous.io.removeAllListeners();
      previous.disconnect();
    }
    const auth: DeviceHandshakeAuth = { token: this.config.token, protocol: PROTOCOL_VERSION };
    const socket: DeviceSocket = io(`${this.server}${DEVICE_NAMESPACE}`, {
      // WebSocket only: long polling would need sticky sessions in front of several dispatchers.
      transports: ['websocket'],
      auth: { ...auth },
      // Each agent its own connection, even to a URL another agent in this process uses (tests do).
      forceNew: true,
      reconnection: false,
      ...this.config.socketOptions,
    });
    this.socket = socket;
    this.pacer?.drop();
    // A new connection, a new allowance at the dispatcher: its first announce goes at once.
    this.pacer = new AnnouncePacer((payload, timeoutMs, settled) =>
      this.sendAnnounce(socket, payload, timeoutMs, settled),
    );
    socket.on('connect', () => {
      this.connectedAt = performance.now();
      this.tried = 0;
      this.config.logger.info({ server: this.server, socket_id: socket.id }, 'connected to dispatcher');
      this.on.connected();
    });
    socket.on('connect_error', (error) => this.onConnectError(socket, error));
    socket.on('disconnect', (reason) => this.onDisconnect(socket, reason));
    // One entry for every event the dispatcher sends (connect, disconnect and connect_error are socket.io's own).
    socket.onAny((event: unknown, message: unknown, ack: unknown) => this.receive(socket, event, message, ack));
  }

  /** Nothing the dispatcher sends is trusted blindly: an unknown event or an invalid message is logged and dropped. */
  private receive(socket: DeviceSocket, event: unknown, message: unknown, ack: unknown): void {
    if (socket !== this.socket) {
      return;
    }
    const receipt = receiveMessage(FROM_DISPATCHER, this.receiver, socket, event, message, ack);
    if (receipt.result === 'unknown_event') {
      this.config.logger.warn({ event: String(event).slice(0, 64) }, 'unknown event from dispatcher; dropped');
    } else if (receipt.result === 'malformed') {
      this.config.logger.warn(
        { event: receipt.event, problem: receipt.problem },
        'invalid message from dispatcher; dropped',
      );
    }
  }

  private onConnectError(socket: DeviceSocket, error: Error): void {
    if (this.closed || socket !== this.socket) {
      return;
    }
    if (error.message === HANDSHAKE_ERRORS.token) {
      this.on.refused('token');
      return;
    }
    if (error.message.startsWith(HANDSHAKE_ERRORS.protocol)) {
      this.config.logger.error(
        { error: error.message, protocol: PROTOCOL_VERSION },
        'dispatcher refused this agent version',
      );
      this.on.refused('protocol');
      return;
    }
    const wait = handshakeWait(error);
    if (wait !== null) {
      // Not final, and the same on every dispatcher: wait as asked, then try again, never sooner.
      this.config.logger.warn(
        { server: this.server, error: error.message, retry_in_ms: wait },
        'dispatcher asks this device to wait before connecting again',
      );
      clearTimeout(this.retryTimer);
      this.retryTimer = setTimeout(() => {
        if (!this.closed) {
          this.connect();
        }
      }, wait);
      return;
    }
    this.config.logger.warn({ server: this.server, error: error.message }, 'cannot reach dispatcher; retrying');
    this.retry();
  }

  private onDisconnect(socket: DeviceSocket, reason: string): void {
    // socket.io-client keeps what was emitted while the connection was failing and sends it after the
    // next connect; events of a task that ended with the old connection must not reach the new one.
    socket.sendBuffer = [];
    if (this.closed || socket !== this.socket) {
      return;
    }
    this.pacer?.drop();
    this.config.logger.warn({ server: this.server, reason }, 'disconnected from dispatcher');
    // A dispatcher that went away (a restart, a crash) is retried from the start of the curve, as
    // socket.io's reconnection would; one that sent this device away quickly keeps the backoff going.
    if (reason !== 'io server disconnect' || performance.now() - this.connectedAt >= STABLE_CONNECTION_MS) {
      this.attempts = 0;
    }
    this.on.disconnected(reason);
    if (!this.closed) {
      // A revoked token is refused at the next handshake and ends the agent; anything else heals.
      this.retry();
    }
  }

  /**
   * The next attempt: another server not yet tried since the last good connection, quickly; the same
   * server again (or all of them once more), after the backoff.
   */
  private retry(): void {
    clearTimeout(this.retryTimer);
    const servers = this.config.servers.length;
    this.tried++;
    const failover = servers > 1 && this.tried < servers;
    if (servers > 1) {
      this.index = (this.index + 1) % servers;
    }
    const delay = failover ? failoverDelay() : backoffDelay(this.attempts++);
    this.retryTimer = setTimeout(() => {
      if (!this.closed) {
        if (!failover) {
          this.tried = 0;
        }
        this.connect();
      }
    }, delay);
  }
}
