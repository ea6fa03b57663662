import { Inject, Injectable } from '@nestjs/common';
import type { BeforeApplicationShutdown } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { Server } from 'socket.io';
import type { z } from 'zod';
import {
  APP_CONFIG,
  DEVICE_NAMESPACE,
  LOGGER,
  PROTOCOL_VERSION,
  PgService,
  announceSchema,
  deltaSchema,
  doneSchema,
  looksLikeDeviceToken,
  sha256Hex,
  taskErrorSchema,
} from '@app/common';
import type { AppConfig, DeviceSocketData, DeviceToServerEvents, Logger, ServerToDeviceEvents } from '@app/common';
import { DispatcherMetrics } from '../metrics/dispatcher-metrics.service';
import { DispatchService } from '../relay/dispatch.service';
import { DeviceRegistry } from './device-registry.service';
import { DeviceSession } from './device-session';
import type { DeviceSocket } from './device-session';
import { PresenceService } from './presence.service';

/** How often connected devices are checked for revocation (a revoked device is dropped within this). */
const REVOCATION_CHECK_MS = 1_000;
/**
 * socket.io's own heartbeat: the server pings every PING_INTERVAL_MS and drops a device that has
 * not answered within the rest of DEVICE_INACTIVITY_MS (frozen, network gone).
 */
const PING_INTERVAL_MS = 5_000;
/** An event larger than this is refused by socket.io before it is parsed. */
const MAX_EVENT_BYTES = 2 * 1024 * 1024;

/**
 * The `/devices` namespace: authenticates devices at the handshake, keeps the registry and presence
 * up to date, validates every event a device sends, and passes the valid ones to the dispatcher.
 */
@Injectable()
export class DeviceGateway implements BeforeApplicationShutdown {
  private io: Server | null = null;
  private revocationTimer: NodeJS.Timeout | null = null;

  constructor(
    private readonly adapterHost: HttpAdapterHost,
    private readonly db: PgService,
    private readonly registry: DeviceRegistry,
    private readonly presence: PresenceService,
    private readonly dispatch: DispatchService,
    private readonly metrics: DispatcherMetrics,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  /** Attaches socket.io to the HTTP server; called once the server exists. */
  start(): void {
    const io = new Server<DeviceToServerEvents, ServerToDeviceEvents, Record<string, never>, DeviceSocketData>(
      this.adapterHost.httpAdapter.getHttpServer(),
      {
        transports: ['websocket'],
        pingInterval: PING_INTERVAL_MS,
        pingTimeout: Math.max(1_000, this.config.DEVICE_INACTIVITY_MS - PING_INTERVAL_MS),
        maxHttpBufferSize: MAX_EVENT_BYTES,
        serveClient: false,
      },
    );
    this.io = io;
    const namespace = io.of(DEVICE_NAMESPACE);
    namespace.use((socket, next) => {
      this.authenticate(socket.handshake.auth as Record<string, unknown>).then(
        (data) => {
          if (!data) {
            next(new Error('invalid_device_token'));
            return;
          }
          socket.data = data;
          next();
        },
        (err: unknown) => {
          this.logger.error({ err }, 'device authentication failed');
          next(new Error('server_error'));
        },
      );
    });
    namespace.on('connection', (socket) => this.onConnection(socket));
    this.revocationTimer = setInterval(() => void this.dropRevoked().catch(() => undefined), REVOCATION_CHECK_MS);
    this.revocationTimer.unref();
  }

  private async authenticate(auth: Record<string, unknown>): Promise<DeviceSocketData | null> {
    const token = auth?.token;
    if (typeof token !== 'string' || !looksLikeDeviceToken(token)) {
      return null;
    }
    const { rows } = await this.db.sql<{ id: string; org_id: string | null; name: string; revoked_at: Date | null }>(
      `SELECT id, org_id, name, revoked_at FROM devices WHERE token_hash = $1`,
      [sha256Hex(token)],
    );
    const device = rows[0];
    if (!device || device.revoked_at) {
      return null;
    }
    return { deviceId: device.id, orgId: device.org_id, name: device.name };
  }

  private onConnection(socket: DeviceSocket): void {
    const session = new DeviceSession(socket);
    const replaced = this.registry.add(session);
    if (replaced) {
      this.logger.warn({ deviceId: session.id }, 'device connected again: dropping its older connection');
      replaced.socket.disconnect(true);
      void this.onGone(replaced);
    }
    this.logger.info({ deviceId: session.id, name: socket.data.name, pool: session.pool }, 'device connected');
    this.touch(session.id);

    socket.on('announce', (raw, ack) => {
      const payload = this.validate(session, announceSchema, raw, 'announce');
      const reply = typeof ack === 'function' ? ack : () => undefined;
      if (!payload) {
        reply({ ok: false, error: 'invalid announce payload' });
        return;
      }
      this.registry.setQueues(session, session.serve(payload.models));
      session.features = new Set(payload.features);
      session.available = payload.available;
      session.announced = true;
      reply({ ok: true, device_id: session.id, pool: socket.data.orgId ? 'direct' : 'network' });
      this.logger.info(
        { deviceId: session.id, backend: payload.backend, agent: payload.agent_version, models: payload.models },
        'device announced',
      );
      void this.presence.publish(session).then(
        () => this.dispatch.kick(session, 'all'),
        (err: unknown) => this.logger.error({ err }, 'presence update failed'),
      );
    });
    socket.on('task:delta', (raw) => {
      const payload = this.validate(session, deltaSchema, raw, 'task:delta');
      if (payload) {
        this.dispatch.onDelta(session, payload);
      }
    });
    socket.on('task:done', (raw) => {
      const payload = this.validate(session, doneSchema, raw, 'task:done');
      if (payload) {
        void this.dispatch.onDone(session, payload).catch((err: unknown) => this.logger.error({ err }, 'done failed'));
      }
    });
    socket.on('task:error', (raw) => {
      const payload = this.validate(session, taskErrorSchema, raw, 'task:error');
      if (payload) {
        void this.dispatch
          .onError(session, payload)
          .catch((err: unknown) => this.logger.error({ err }, 'error failed'));
      }
    });
    socket.on('disconnect', (reason) => {
      this.logger.info({ deviceId: session.id, reason }, 'device disconnected');
      void this.onGone(session);
    });
  }

  private async onGone(session: DeviceSession): Promise<void> {
    this.registry.remove(session);
    this.touch(session.id);
    session.available = false;
    await Promise.all([
      this.presence.withdraw(session).catch(() => undefined),
      this.dispatch
        .onDisconnect(session)
        .catch((err: unknown) => this.logger.error({ err, deviceId: session.id }, 'disconnect handling failed')),
    ]);
  }

  /** A device is not trusted: every payload is checked, and a bad one is logged and dropped. */
  private validate<T>(session: DeviceSession, schema: z.ZodType<T>, raw: unknown, event: string): T | null {
    const parsed = schema.safeParse(raw);
    if (!parsed.success) {
      this.metrics.invalidEvents.inc({ reason: 'malformed' });
      // A malformed event about the device's own task ends that task: its output can no longer be trusted.
      const address = (raw as { task_address?: unknown } | null)?.task_address;
      if (event !== 'announce' && session.task && address === session.task.address) {
        void this.dispatch
          .onInvalidEvent(session, `invalid ${event}: ${parsed.error.issues[0]?.message ?? 'malformed'}`)
          .catch((err: unknown) => this.logger.error({ err }, 'invalid event handling failed'));
      }
      this.logger.warn(
        { deviceId: session.id, event, issue: parsed.error.issues[0]?.message, path: parsed.error.issues[0]?.path },
        'invalid event from device: ignored',
      );
      return null;
    }
    return parsed.data;
  }

  /** Records when a device was last seen (on connect and disconnect), not awaited. */
  private touch(deviceId: string): void {
    void this.db.sql(`UPDATE devices SET last_seen_at = now() WHERE id = $1`, [deviceId]).catch(() => undefined);
  }

  private async dropRevoked(): Promise<void> {
    const ids = [...this.registry.all()].map((s) => s.id);
    if (ids.length === 0) {
      return;
    }
    const { rows: revoked } = await this.db.sql<{ id: string }>(
      `SELECT id FROM devices WHERE id = ANY($1::uuid[]) AND revoked_at IS NOT NULL`,
      [ids],
    );
    for (const { id } of revoked) {
      const session = this.registry.get(id);
      if (session) {
        this.logger.warn({ deviceId: id }, 'device token revoked: disconnecting');
        session.socket.disconnect(true);
      }
    }
  }

  /**
   * Disconnects every device (they reconnect to another dispatcher) and closes socket.io. Must run
   * before the HTTP server closes, which would otherwise wait for the open WebSockets forever.
   */
  async close(): Promise<void> {
    if (this.revocationTimer) {
      clearInterval(this.revocationTimer);
      this.revocationTimer = null;
    }
    const sessions = [...this.registry.all()];
    await Promise.all(sessions.map((s) => this.onGone(s)));
    const io = this.io;
    this.io = null;
    await new Promise<void>((resolve) => (io ? void io.close(() => resolve()) : resolve()));
  }

  async beforeApplicationShutdown(): Promise<void> {
    await this.close();
  }
}

export { PROTOCOL_VERSION };
