import { Inject, Injectable } from '@nestjs/common';
import type { OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { DEVICE_STATE_TTL_MS, LOGGER, liveKeys, InstanceService } from '@app/common';
import type { Logger } from '@app/common';
import { RedisBatch } from '../infra/redis-batch';
import { DeviceRegistry } from './device-registry.service';
import type { DeviceSession } from './device-session';

/** How often each connected device's state is renewed (its heartbeat time with it). */
const RENEW_MS = 5_000;
/**
 * Renewals go out a slice of the devices at a time, spread over RENEW_MS: ten thousand devices renewed
 * at once are twenty thousand commands in one burst, which everything else on the connection (and
 * Redis) would wait behind.
 */
const RENEW_SLICES = 10;
/**
 * A slice's renewals in one command: building two commands per device (HSET, PEXPIRE) in the
 * client cost more than Redis running them.
 */
const RENEW_LUA = `for _, key in ipairs(KEYS) do
  redis.call('HSET', key, 'hb', ARGV[1])
  redis.call('PEXPIRE', key, ARGV[2])
end`;

/**
 * What operators see of the devices of this dispatcher (GET /admin/devices, /admin/queues, the
 * dashboard): when each connected, its last heartbeat, what it serves, the task it holds (that one
 * set by the task's transitions, see TASK_TRANSITIONS_LUA). Kept in Redis, written in the background
 * (never awaited on a task's path) in the dispatcher's batch of background writes, gone with the
 * device, or a while after its dispatcher dies.
 */
@Injectable()
export class DeviceStates implements OnModuleInit, OnModuleDestroy {
  private timer: NodeJS.Timeout | null = null;
  private slice = 0;

  constructor(
    private readonly batch: RedisBatch,
    private readonly registry: DeviceRegistry,
    private readonly instance: InstanceService,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  onModuleInit(): void {
    this.timer = setInterval(() => this.renew(), RENEW_MS / RENEW_SLICES);
    this.timer.unref();
  }

  onModuleDestroy(): void {
    if (this.timer) {
      clearInterval(this.timer);
    }
  }

  /**
   * `fresh`: the state of an earlier connection is dropped first. The batch keeps the order of the
   * commands, so nothing written for this device later in the batch (or in a later one) precedes it.
   */
  private write(session: DeviceSession, fields: Record<string, string | number>, fresh = false): void {
    const key = liveKeys.device(session.id);
    this.batch
      .add((pipeline) => {
        if (fresh) {
          pipeline.del(key);
        }
        pipeline.hset(key, fields).pexpire(key, DEVICE_STATE_TTL_MS);
      })
      .catch((err: unknown) => this.logger.warn({ err: (err as Error).message }, 'could not record a device state'));
  }

  connected(session: DeviceSession): void {
    const now = Date.now();
    this.write(session, { disp: this.instance.id, conn: now, hb: now, pool: session.pool, avail: 0, task: '' }, true);
  }

  announced(session: DeviceSession): void {
    this.write(session, {
      models: JSON.stringify(session.models),
      features: JSON.stringify([...session.features].sort()),
      avail: session.available ? 1 : 0,
    });
  }

  gone(session: DeviceSession): void {
    this.batch
      .add((pipeline) => pipeline.del(liveKeys.device(session.id)))
      .catch((err: unknown) => this.logger.warn({ err: (err as Error).message }, 'could not clear a device state'));
  }

  /** One slice of the connected devices (by position, so each is renewed about every RENEW_MS). */
  private renew(): void {
    const slice = this.slice;
    this.slice = (slice + 1) % RENEW_SLICES;
    if (this.registry.size === 0) {
      return;
    }
    const due: string[] = [];
    let i = 0;
    for (const session of this.registry.all()) {
      if (i++ % RENEW_SLICES === slice) {
        due.push(liveKeys.device(session.id));
      }
    }
    if (due.length === 0) {
      return;
    }
    // The socket answered socket.io's pings so far (a silent one is dropped): its heartbeat is now.
    this.batch
      .add((pipeline) => pipeline.eval(RENEW_LUA, due.length, ...due, Date.now(), DEVICE_STATE_TTL_MS))
      .catch((err: unknown) => this.logger.warn({ err: (err as Error).message }, 'device states renewal failed'));
  }
}
