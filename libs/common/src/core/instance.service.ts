import { randomUUID } from 'node:crypto';
import type { RedisClient } from '../redis/redis';
import { Inject, Injectable } from '@nestjs/common';
import type { BeforeApplicationShutdown, OnModuleInit } from '@nestjs/common';
import { LOGGER } from '../logging/logger';
import type { Logger } from '../logging/logger';
import { KeySpace } from '../redis/key-space';
import type { InstanceKind } from '../redis/keys';
import { CORE_OPTIONS } from './core-options';
import type { CoreOptions, LivenessOptions } from './core-options';
import { REDIS } from './redis-connections';

/** How long an instance counts as alive without renewing its key; renewed every third of it. */
export const INSTANCE_TTL_MS = 3_000;
/** An instance whose presence lapsed this long ago is dropped from the instances set. */
const FORGET_AFTER_MS = 3_600_000;

/**
 * This process's identity (a UUID per process) and liveness: a key that expires unless renewed every
 * second, and its entry in the set of instances of its kind, scored by expiry. Jobs carry the api's
 * id, so that a dispatcher stops the tasks of an api that died (their clients went with it); tasks
 * held carry the dispatcher's, so that the surviving dispatchers take over those of one that died.
 * Also tells whether other instances live.
 */
@Injectable()
export class InstanceService implements OnModuleInit, BeforeApplicationShutdown {
  readonly id = randomUUID();
  readonly kind: InstanceKind;
  private readonly liveness: LivenessOptions;
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;
  private readonly keys: KeySpace;

  constructor(
    @Inject(REDIS) private readonly redis: RedisClient,
    @Inject(LOGGER) private readonly logger: Logger,
    @Inject(CORE_OPTIONS) options: CoreOptions,
  ) {
    this.kind = options.kind;
    this.liveness = options.liveness;
    this.keys = KeySpace.of(redis);
  }

  async onModuleInit(): Promise<void> {
    // Renewed at once whenever the connection (re)opens: a Redis restarted without its data knows
    // this instance again within a round trip.
    this.redis.on('ready', () => void this.renew());
    if (this.liveness.awaitFirstRenewal) {
      await this.beat();
    } else if (this.redis.status === 'ready') {
      void this.renew();
    }
    this.timer = setInterval(() => void this.renew(), INSTANCE_TTL_MS / 3);
    this.timer.unref();
  }

  private async renew(): Promise<void> {
    if (this.stopped) {
      return;
    }
    await this.beat().catch((err: unknown) =>
      this.logger.warn({ err: (err as Error).message }, `could not renew this ${this.kind} presence`),
    );
  }

  private async beat(): Promise<void> {
    const expiry = Date.now() + INSTANCE_TTL_MS;
    await this.redis
      .multi()
      .set(this.keys.instance(this.kind, this.id), String(expiry), 'PX', INSTANCE_TTL_MS)
      .zadd(this.keys.instances(this.kind), expiry, this.id)
      // Instances gone for an hour have no task left anywhere: forgotten, so that the set stays small.
      .zremrangebyscore(this.keys.instances(this.kind), '-inf', expiry - FORGET_AFTER_MS)
      .exec();
  }

  /** Instances of this kind whose presence lapsed (they died without leaving), oldest first. */
  async lapsed(): Promise<string[]> {
    return this.redis.zrangebyscore(this.keys.instances(this.kind), '-inf', Date.now());
  }

  /** Forgets a dead instance of this kind once what it held is taken over. */
  async forget(id: string): Promise<void> {
    await this.redis.zrem(this.keys.instances(this.kind), id);
  }

  /**
   * Which of these instances are dead: they renewed their presence once and then let it lapse. One
   * never seen (its first renewal still on its way) counts as alive.
   */
  async dead(kind: InstanceKind, ids: string[]): Promise<Set<string>> {
    if (ids.length === 0) {
      return new Set();
    }
    const [found, scores] = await Promise.all([
      this.redis.mget(ids.map((id) => this.keys.instance(kind, id))),
      this.redis.zmscore(this.keys.instances(kind), ...ids),
    ]);
    const now = Date.now();
    return new Set(ids.filter((_, i) => found[i] === null && scores[i] !== null && Number(scores[i]) < now));
  }

  async beforeApplicationShutdown(): Promise<void> {
    this.stopped = true;
    if (this.timer) {
      clearInterval(this.timer);
    }
    if (this.liveness.onShutdown === 'withdraw') {
      await this.redis
        .multi()
        .del(this.keys.instance(this.kind, this.id))
        .zrem(this.keys.instances(this.kind), this.id)
        .exec()
        .catch((err: unknown) => this.logger.warn({ err: (err as Error).message }, 'could not withdraw presence'));
    }
  }
}
