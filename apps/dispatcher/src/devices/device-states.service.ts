import { Inject, Injectable } from '@nestjs/common';
import type { OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import type { ChainableCommander } from 'ioredis';
import { DeviceStateRepository, LOGGER, InstanceService, REDIS } from '@app/common';
import type { Logger, RedisClient } from '@app/common';
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
 * What operators see of the devices of this dispatcher (GET /admin/devices, /admin/queues, the
 * dashboard): when each connected, its last heartbeat, what it serves, the task it holds (that one
 * set after the task's transitions, see TaskRepository). Kept in Redis (DeviceStateRepository),
 * written in the background (never awaited on a task's path) in the dispatcher's batch of background
 * writes, gone with the device, or a while after its dispatcher dies.
 */
@Injectable()
export class DeviceStates implements OnModuleInit, OnModuleDestroy {
  private timer: NodeJS.Timeout | null = null;
  private slice = 0;
  private readonly states: DeviceStateRepository;

  constructor(
    private readonly batch: RedisBatch,
    private readonly registry: DeviceRegistry,
    private readonly instance: InstanceService,
    @Inject(REDIS) redis: RedisClient,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {
    this.states = new DeviceStateRepository(redis);
  }

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
   * Adds the writes to the batch, which keeps their order: nothing written for a device later in the
   * batch (or in a later one) precedes what is written now.
   */
  private write(what: string, writes: (pipeline: ChainableCommander) => void): void {
    this.batch.add(writes).catch((err: unknown) => this.logger.warn({ err: (err as Error).message }, what));
  }

  /** A new connection: the state of an earlier connection of the device is dropped first. */
  connected(session: DeviceSession): void {
    this.write('could not record a device state', (pipeline) =>
      this.states.connected(pipeline, session.id, { dispatcher: this.instance.id, pool: session.pool, at: Date.now() }),
    );
  }

  /** What the device serves now. */
  announced(session: DeviceSession): void {
    this.write('could not record a device state', (pipeline) =>
      this.states.serves(pipeline, session.id, {
        models: session.models,
        digests: session.models.map((m) => session.digestOf(m)),
        features: [...session.features],
        available: session.available,
      }),
    );
  }

  gone(session: DeviceSession): void {
    this.write('could not clear a device state', (pipeline) => this.states.gone(pipeline, session.id));
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
        due.push(session.id);
      }
    }
    if (due.length === 0) {
      return;
    }
    // The socket answered socket.io's pings so far (a silent one is dropped): its heartbeat is now.
    this.write('device states renewal failed', (pipeline) => this.states.renew(pipeline, due, Date.now()));
  }
}
