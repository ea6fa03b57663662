import { randomUUID } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import type { BeforeApplicationShutdown, OnModuleInit } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { LOGGER, keys } from '@app/common';
import type { Logger } from '@app/common';
import { REDIS } from './redis.module';

/** How long an instance counts as alive without renewing its key; renewed every third of it. */
const INSTANCE_TTL_MS = 3_000;
/** An instance whose presence lapsed this long ago is dropped from the instances set. */
const FORGET_AFTER_MS = 3_600_000;

/**
 * This api instance's identity and liveness: a key that expires unless renewed every second. Jobs
 * carry the id; a dispatcher stops a task whose api instance died (its client went with it).
 */
@Injectable()
export class InstanceService implements OnModuleInit, BeforeApplicationShutdown {
  readonly id = randomUUID();
  private timer: NodeJS.Timeout | null = null;

  constructor(
    @Inject(REDIS) private readonly redis: Redis,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  onModuleInit(): void {
    // Not awaited: the api starts (and answers health checks) while Redis is down, and says so in /readyz.
    // Renewed at once whenever the connection (re)opens.
    this.redis.on('ready', () => void this.beat());
    if (this.redis.status === 'ready') {
      void this.beat();
    }
    this.timer = setInterval(() => void this.beat(), INSTANCE_TTL_MS / 3);
    this.timer.unref();
  }

  private async beat(): Promise<void> {
    const expiry = Date.now() + INSTANCE_TTL_MS;
    await this.redis
      .multi()
      .set(keys.instance('api', this.id), String(expiry), 'PX', INSTANCE_TTL_MS)
      .zadd(keys.instances('api'), expiry, this.id)
      // Instances gone for an hour have no task left anywhere: forgotten, so that the set stays small.
      .zremrangebyscore(keys.instances('api'), '-inf', expiry - FORGET_AFTER_MS)
      .exec()
      .catch((err: unknown) => this.logger.warn({ err: (err as Error).message }, 'could not renew this api presence'));
  }

  async beforeApplicationShutdown(): Promise<void> {
    if (this.timer) {
      clearInterval(this.timer);
    }
  }
}
