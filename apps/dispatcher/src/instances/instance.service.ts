import { randomUUID } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import type { BeforeApplicationShutdown, OnModuleInit } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { LOGGER, keys } from '@app/common';
import type { InstanceKind, Logger } from '@app/common';
import { REDIS } from '../infra/redis.providers';

/** How long an instance counts as alive without renewing its key; renewed every third of it. */
/** An instance whose presence lapsed this long ago is dropped from the instances set. */
const FORGET_AFTER_MS = 3_600_000;

export const INSTANCE_TTL_MS = 3_000;

/**
 * This dispatcher's identity and liveness: a key that expires unless renewed every second, and its
 * entry in the set of dispatchers (scored by expiry), so that the survivors notice within seconds
 * when it dies and take over its tasks (TakeoverService). Also tells whether other instances live.
 */
@Injectable()
export class InstanceService implements OnModuleInit, BeforeApplicationShutdown {
  readonly id = randomUUID();
  private timer: NodeJS.Timeout | null = null;

  constructor(
    @Inject(REDIS) private readonly redis: Redis,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  async onModuleInit(): Promise<void> {
    await this.beat();
    this.timer = setInterval(() => {
      this.beat().catch((err: unknown) =>
        this.logger.warn({ err: (err as Error).message }, 'could not renew this dispatcher presence'),
      );
    }, INSTANCE_TTL_MS / 3);
    this.timer.unref();
  }

  private async beat(): Promise<void> {
    const expiry = Date.now() + INSTANCE_TTL_MS;
    await this.redis
      .multi()
      .set(keys.instance('dispatcher', this.id), String(expiry), 'PX', INSTANCE_TTL_MS)
      .zadd(keys.instances('dispatcher'), expiry, this.id)
      // Instances gone for an hour have no task left anywhere: forgotten, so that the set stays small.
      .zremrangebyscore(keys.instances('dispatcher'), '-inf', expiry - FORGET_AFTER_MS)
      .exec();
  }

  /** Dispatchers whose presence lapsed (they died without leaving), oldest first. */
  async lapsed(): Promise<string[]> {
    return this.redis.zrangebyscore(keys.instances('dispatcher'), '-inf', Date.now());
  }

  /** Forgets a dead dispatcher once its tasks are taken over. */
  async forget(id: string): Promise<void> {
    await this.redis.zrem(keys.instances('dispatcher'), id);
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
      this.redis.mget(ids.map((id) => keys.instance(kind, id))),
      this.redis.zmscore(keys.instances(kind), ...ids),
    ]);
    const now = Date.now();
    return new Set(ids.filter((_, i) => found[i] === null && scores[i] !== null && Number(scores[i]) < now));
  }

  /** Leaving on purpose: the survivors need not wait for the key to lapse (there is nothing to take over). */
  async beforeApplicationShutdown(): Promise<void> {
    if (this.timer) {
      clearInterval(this.timer);
    }
    await this.redis
      .multi()
      .del(keys.instance('dispatcher', this.id))
      .zrem(keys.instances('dispatcher'), this.id)
      .exec()
      .catch((err: unknown) => this.logger.warn({ err: (err as Error).message }, 'could not withdraw presence'));
  }
}
