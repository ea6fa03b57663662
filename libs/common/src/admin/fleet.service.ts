import type { RedisClient } from '../redis/redis';
import { AppError } from '../errors/app-error';
import { DeviceStateRepository } from '../live/device-state-repository';
import type { DeviceLive } from '../live/device-state-repository';
import { LiveState } from '../live/live-state';
import type { QueueLive } from '../live/live-state';
import { NETWORK_POOL } from '../queues/queues';
import { AdminDevicesService } from './devices.service';
import type { DeviceRecord } from './devices.service';
import type { Sql } from './sql';

/** A device with what it is doing now: its registration (Postgres) and its live state (Redis). */
export type FleetDevice = DeviceRecord & DeviceLive;

/** One organization's line in a queue. */
export interface FleetLine {
  org: string | null;
  org_id: string;
  waiting: number;
  oldest_wait_ms: number | null;
}

/** One (model, pool) queue as operators see it. */
export interface FleetQueue {
  queue: string;
  model: string;
  pool: 'direct' | 'network';
  /** The organization of a direct pool; null for the network. */
  org: string | null;
  waiting: number;
  oldest_wait_ms: number | null;
  devices_online: number;
  devices_busy: number;
  /** The organizations with jobs waiting, each with its own line (fair share serves them in turn). */
  lines: FleetLine[];
}

/**
 * The operators' live view of the fleet: which devices are online and what each is doing, and what
 * is queued for which model. Registrations come from Postgres, live state from what the dispatchers
 * keep in Redis (DeviceStateRepository, LiveState); the admin HTTP API, the CLI and the dashboard all
 * read it here.
 */
export class AdminFleetService {
  private readonly live: LiveState;
  private readonly states: DeviceStateRepository;
  private readonly devices: AdminDevicesService;

  constructor(
    private readonly sql: Sql,
    redis: RedisClient,
  ) {
    this.live = new LiveState(redis);
    this.states = new DeviceStateRepository(redis);
    this.devices = new AdminDevicesService(sql);
  }

  async listDevices(): Promise<FleetDevice[]> {
    const records = await this.devices.list();
    const live = await this.read(() => this.states.live(records.map((d) => d.id)));
    return records.map((d) => ({ ...d, ...live.get(d.id)! }));
  }

  async showDevice(id: string): Promise<FleetDevice> {
    const record = await this.devices.show(id);
    const live = await this.read(() => this.states.live([id]));
    return { ...record, ...live.get(id)! };
  }

  async queues(): Promise<FleetQueue[]> {
    const queues = await this.read(() => this.live.queues());
    const orgIds = [...new Set(queues.flatMap((q) => [q.pool, ...q.lines.map((l) => l.org_id)]))].filter(
      (id) => id !== NETWORK_POOL,
    );
    const names = new Map(
      (
        await this.sql.query<{ id: string; name: string }>(
          // Pools and lines are named by org ids that Redis holds: only well-formed ones reach the cast.
          `SELECT id::text, name FROM organizations WHERE id::text = ANY($1::text[])`,
          [orgIds],
        )
      ).map((o) => [o.id, o.name]),
    );
    return queues.map((q: QueueLive) => ({
      queue: q.queue,
      model: q.model,
      pool: q.pool === NETWORK_POOL ? 'network' : 'direct',
      org: q.pool === NETWORK_POOL ? null : (names.get(q.pool) ?? null),
      waiting: q.waiting,
      oldest_wait_ms: q.oldest_wait_ms,
      devices_online: q.devices_online,
      devices_busy: q.devices_busy,
      lines: q.lines.map((l) => ({
        org: names.get(l.org_id) ?? null,
        org_id: l.org_id,
        waiting: l.waiting,
        oldest_wait_ms: l.oldest_wait_ms,
      })),
    }));
  }

  /** Redis unreachable is a 503 the operator can act on, not a 500. */
  private async read<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch {
      // The driver's message names addresses: it stays out of the answer.
      throw new AppError('service_unavailable', 'The live state cannot be read: Redis is unreachable.');
    }
  }
}
