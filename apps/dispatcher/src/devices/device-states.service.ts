import { Inject, Injectable } from '@nestjs/common';
import type { OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { DEVICE_STATE_TTL_MS, LOGGER, liveKeys } from '@app/common';
import type { Logger } from '@app/common';
import { REDIS } from '../infra/redis.providers';
import { InstanceService } from '../instances/instance.service';
import { DeviceRegistry } from './device-registry.service';
import type { DeviceSession } from './device-session';

/** How often connected devices' states are renewed (their heartbeat time with them). */
const RENEW_MS = 5_000;

/**
 * What operators see of the devices of this dispatcher (GET /admin/devices, /admin/queues, the
 * dashboard): when each connected, its last heartbeat, what it serves, the task it holds. Kept in
 * Redis, written in the background (never awaited on a task's path), gone with the device, or a while
 * after its dispatcher dies.
 */
@Injectable()
export class DeviceStates implements OnModuleInit, OnModuleDestroy {
  private timer: NodeJS.Timeout | null = null;

  constructor(
    @Inject(REDIS) private readonly redis: Redis,
    private readonly registry: DeviceRegistry,
    private readonly instance: InstanceService,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  onModuleInit(): void {
    this.timer = setInterval(() => this.renew(), RENEW_MS);
    this.timer.unref();
  }

  onModuleDestroy(): void {
    if (this.timer) {
      clearInterval(this.timer);
    }
  }

  private write(session: DeviceSession, fields: Record<string, string | number>): void {
    const key = liveKeys.device(session.id);
    this.redis
      .multi()
      .hset(key, fields)
      .pexpire(key, DEVICE_STATE_TTL_MS)
      .exec()
      .catch((err: unknown) => this.logger.warn({ err: (err as Error).message }, 'could not record a device state'));
  }

  connected(session: DeviceSession): void {
    const now = Date.now();
    // A stale state left behind would show the device's last connection until it expires: worth a warning.
    this.redis
      .del(liveKeys.device(session.id))
      .catch((err: unknown) => this.logger.warn({ err: (err as Error).message }, 'could not clear a device state'));
    this.write(session, { disp: this.instance.id, conn: now, hb: now, pool: session.pool, avail: 0, task: '' });
  }

  announced(session: DeviceSession): void {
    this.write(session, {
      models: JSON.stringify(session.models),
      features: JSON.stringify([...session.features].sort()),
      avail: session.available ? 1 : 0,
    });
  }

  task(session: DeviceSession, address: string | null): void {
    this.write(session, { task: address ?? '' });
  }

  gone(session: DeviceSession): void {
    this.redis
      .del(liveKeys.device(session.id))
      .catch((err: unknown) => this.logger.warn({ err: (err as Error).message }, 'could not clear a device state'));
  }

  private renew(): void {
    const now = Date.now();
    const pipeline = this.redis.pipeline();
    for (const session of this.registry.all()) {
      const key = liveKeys.device(session.id);
      // The socket answered socket.io's pings so far (a silent one is dropped): its heartbeat is now.
      pipeline.hset(key, 'hb', now).pexpire(key, DEVICE_STATE_TTL_MS);
    }
    pipeline
      .exec()
      .catch((err: unknown) => this.logger.warn({ err: (err as Error).message }, 'device states renewal failed'));
  }
}
