import { Inject, Injectable } from '@nestjs/common';
import type { BeforeApplicationShutdown } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { Server } from 'socket.io';
import {
  APP_CONFIG,
  DEVICE_EVENTS,
  DEVICE_NAMESPACE,
  HANDSHAKE_ERRORS,
  LOGGER,
  receiveMessage,
  replyTo,
} from '@app/common';
import type {
  AppConfig,
  DeviceSocketData,
  DeviceToServerCatalog,
  DeviceToServerEvents,
  Logger,
  MessageReceiver,
  ServerToDeviceEvents,
} from '@app/common';
import { ClientAddresses } from './client-address';
import { DeviceAnnounces } from './device-announces.service';
import { DeviceAuth } from './device-auth.service';
import { DeviceHandshake } from './device-handshake.service';
import { DeviceRegistry } from './device-registry.service';
import { DeviceSession, type DeviceSocket } from './device-session';
import { DeviceStates } from './device-states.service';
import { DeviceStrikes } from './device-strikes.service';
import { EventBudget } from './event-budget';
import { forgetRequests } from './forget-requests';
import { heartbeat } from './heartbeat';
import { isBinaryPacket, jsonOnlyParser } from './json-only-parser';
import { PresenceService } from './presence.service';

/**
 * The `/devices` namespace: checks devices at the handshake (DeviceHandshake), keeps the registry and
 * presence up to date, holds each device to its budget, validates every event a device sends against
 * the catalog (in the device's protocol version, see DeviceSession.dialect), and passes the valid ones
 * on through its handler table. A device that keeps sending what it must not, or sends a binary
 * packet, is disconnected and cools off (DeviceStrikes).
 */
@Injectable()
export class DeviceGateway implements BeforeApplicationShutdown {
  private io: Server | null = null;

  /** Where each event a device may send goes once it passed its schema: every event of the catalog, or this does not compile. */
  private readonly receiver: MessageReceiver<DeviceToServerCatalog, DeviceSession> = {
    handlers: {
      announce: (session, payload, reply) => void this.announces.handle(session, payload, reply),
      'task:delta': (session, payload) => this.registry.events.onDelta(session, payload),
      'task:embedding': (session, payload) => this.registry.events.onEmbedding(session, payload),
      'task:done': (session, payload) => this.registry.events.onDone(session, payload),
      'task:error': (session, payload) => this.registry.events.onError(session, payload),
    },
    refusals: { announce: { ok: false, error: 'invalid announce payload' } },
  };

  constructor(
    private readonly adapterHost: HttpAdapterHost,
    private readonly auth: DeviceAuth,
    private readonly handshake: DeviceHandshake,
    private readonly strikes: DeviceStrikes,
    private readonly registry: DeviceRegistry,
    private readonly presence: PresenceService,
    private readonly announces: DeviceAnnounces,
    private readonly states: DeviceStates,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  /** Attaches socket.io to the HTTP server; called once the server exists. */
  start(): void {
    const io = new Server<DeviceToServerEvents, ServerToDeviceEvents, Record<string, never>, DeviceSocketData>(
      this.adapterHost.httpAdapter.getHttpServer(),
      {
        transports: ['websocket'],
        ...heartbeat(this.config.DEVICE_INACTIVITY_MS),
        // A larger event closes the device's connection before it is parsed.
        maxHttpBufferSize: this.config.DEVICE_MAX_EVENT_BYTES,
        perMessageDeflate: false,
        serveClient: false,
        // The protocol is JSON: binary packets are never reassembled (see JsonOnlyDecoder).
        parser: jsonOnlyParser,
      },
    );
    this.io = io;
    // Before forgetRequests: a proxy's X-Forwarded-For is read from the request it drops.
    const addresses = new ClientAddresses(io, this.config.TRUST_PROXY);
    forgetRequests(io);
    // Nothing is served on the root namespace: a socket there is refused whoever it is.
    io.of('/').use((_socket, next) => next(new Error(HANDSHAKE_ERRORS.token)));
    const namespace = io.of(DEVICE_NAMESPACE);
    namespace.use((socket, next) => {
      this.handshake.check(socket.handshake.auth as Record<string, unknown>, addresses.of(socket)).then(
        (result) => {
          if ('refused' in result) {
            // socket.io sends `data` along with the message in the client's connect_error.
            next(Object.assign(new Error(result.refused), result.data && { data: result.data }));
            return;
          }
          socket.data = result;
          // The token is not needed again: it is not kept for the life of the connection.
          socket.handshake.auth = {};
          next();
        },
        (err: unknown) => {
          this.logger.error({ err }, 'device authentication failed');
          next(new Error('server_error'));
        },
      );
    });
    namespace.on('connection', (socket) => this.onConnection(socket));
    this.auth.watchRevocations((id) => this.registry.get(id)?.socket.disconnect(true));
  }

  private onConnection(socket: DeviceSocket): void {
    const session = new DeviceSession(socket);
    const replaced = this.registry.add(session);
    if (replaced) {
      this.logger.warn({ deviceId: session.id }, 'device connected again: dropping its older connection');
      replaced.socket.disconnect(true);
      this.onGone(replaced);
    }
    this.logger.info(
      { deviceId: session.id, name: socket.data.name, pool: session.pool, protocol: session.dialect.version },
      'device connected',
    );
    this.auth.touch(session.id);
    this.states.connected(session);

    // Every event counts against the device's budget, at its size on the wire.
    const budget = new EventBudget(this.config.DEVICE_MAX_EVENTS_PER_SECOND, this.config.DEVICE_MAX_BYTES_PER_SECOND);
    let bytes = 0;
    socket.conn.on('packet', (packet: { type: string; data?: unknown }) => {
      if (packet.type !== 'message') {
        return;
      }
      if (isBinaryPacket(packet.data)) {
        // Disconnected before socket.io's decoder sees the packet (engine.io emits `data` after `packet`).
        this.strikes.out(session, 'binary');
        return;
      }
      bytes += Buffer.byteLength(packet.data as string);
    });
    // Events are handled here, not by a listener per event name: on each of thousands of sockets a
    // listener is a closure and an entry in a dictionary-mode _events object (bench heap snapshots).
    socket.use(([event, raw, ack]) => {
      const size = bytes;
      bytes = 0;
      if (session.struckOut) {
        // Disconnected as soon as its cooling-off is recorded: nothing it sends meanwhile counts.
        return;
      }
      if (!budget.take(size)) {
        this.refuse(session, event, raw, 'over_budget');
        return;
      }
      this.onEvent(session, event, raw, ack);
    });
    socket.on('disconnect', (reason) => {
      this.logger.info({ deviceId: session.id, reason }, 'device disconnected');
      if (reason === 'transport error') {
        // The WebSocket layer refused a frame the device sent (over DEVICE_MAX_EVENT_BYTES, ws's
        // maxPayload, or malformed): the device's doing, not the network's (a lost connection is
        // `transport close` or `ping timeout`). Cooled off like a binary packet, rather than let it
        // reconnect at once and send it again.
        this.strikes.out(session, 'bad_frame');
      }
      this.onGone(session);
    });
  }

  /** A device is not trusted: every event is checked against the catalog, and a bad one is counted and dropped. */
  private onEvent(session: DeviceSession, event: unknown, raw: unknown, ack: unknown): void {
    const inbound = session.dialect.fromDevice;
    // Announces are held to their rate before anything else: validating one costs more than refusing it.
    if (event === DEVICE_EVENTS.announce && !this.announces.admit(session, replyTo(inbound, event, ack))) {
      return;
    }
    const receipt = receiveMessage(inbound, this.receiver, session, event, raw, ack);
    switch (receipt.result) {
      case 'handled':
        return;
      case 'malformed':
        this.refuse(session, event, raw, 'malformed', receipt.problem);
        return;
      case 'unknown_event':
        // Not an event a device may send: without this it would cost the device nothing to send forever.
        this.logger.warn(
          { deviceId: session.id, event: String(event).slice(0, 64), reason: 'unknown_event' },
          'invalid event from device: ignored',
        );
        this.strike(session, 'unknown_event');
    }
  }

  private onGone(session: DeviceSession): void {
    if (!this.registry.remove(session)) {
      return;
    }
    this.auth.touch(session.id);
    this.states.gone(session);
    this.registry.events.onGone(session);
    this.presence
      .withdraw(session)
      .catch((err: unknown) => this.logger.warn({ err, deviceId: session.id }, 'presence withdrawal failed'));
  }

  /** Drops an event; one that names a task goes to the listener (a task of the device's fails with it). */
  private refuse(session: DeviceSession, event: unknown, raw: unknown, reason: string, detail?: string): void {
    this.logger.warn(
      { deviceId: session.id, event: String(event).slice(0, 64), reason, detail },
      'invalid event from device: ignored',
    );
    const address = (raw as { task_address?: unknown } | null)?.task_address;
    if (event !== DEVICE_EVENTS.announce && typeof address === 'string') {
      this.registry.events.onInvalidEvent(session, address, reason);
    }
    this.strike(session, reason);
  }

  /**
   * Counts a misdeed of a device (also the dispatch module's: events for a task it does not hold); at
   * DEVICE_MAX_INVALID_EVENTS the device is disconnected, its task handled as a device drop, and it
   * cools off (DeviceStrikes).
   */
  strike(session: DeviceSession, reason: string): void {
    this.strikes.strike(session, reason);
  }

  /**
   * Disconnects every device (they reconnect to another dispatcher) and closes socket.io. Must run
   * before the HTTP server closes, which would otherwise wait for the open WebSockets forever.
   */
  async close(): Promise<void> {
    this.auth.stopWatching();
    for (const session of [...this.registry.all()]) {
      session.socket.disconnect(true);
      this.onGone(session);
    }
    const io = this.io;
    this.io = null;
    await new Promise<void>((resolve) => (io ? void io.close(() => resolve()) : resolve()));
  }

  async beforeApplicationShutdown(): Promise<void> {
    await this.close();
  }
}
