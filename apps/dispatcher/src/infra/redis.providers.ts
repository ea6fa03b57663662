import { Inject, Injectable } from '@nestjs/common';
import type { OnApplicationShutdown, Provider } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { APP_CONFIG, coalesceWrites, createBlockingRedis, createRedis } from '@app/common';
import type { AppConfig } from '@app/common';

/**
 * The dispatcher's Redis connections: a constant three, whatever the number of devices, models or
 * queues (BullMQ's lines share the command connection, see LineQueue).
 *
 * Short commands (jobs, streams, transitions, presence), with coalesced writes: the commands of every
 * task issued in one turn of the event loop go out in one socket write (see coalesceWrites).
 */
export const REDIS = Symbol('REDIS');
/** A connection in subscriber mode: jobs waiting, cancels. */
export const SUB_REDIS = Symbol('SUB_REDIS');
/** The task record writer's blocking reads. */
export const RECORDS_REDIS = Symbol('RECORDS_REDIS');

export const redisProviders: Provider[] = [
  {
    provide: REDIS,
    inject: [APP_CONFIG],
    useFactory: (c: AppConfig) =>
      coalesceWrites(createRedis(c.REDIS_URL, { connectionName: 'switchyard-dispatcher' })),
  },
  {
    provide: SUB_REDIS,
    inject: [APP_CONFIG],
    useFactory: (c: AppConfig) => createBlockingRedis(c.REDIS_URL, { connectionName: 'switchyard-dispatcher-sub' }),
  },
  {
    provide: RECORDS_REDIS,
    inject: [APP_CONFIG],
    useFactory: (c: AppConfig) => createBlockingRedis(c.REDIS_URL, { connectionName: 'switchyard-dispatcher-records' }),
  },
];

/**
 * Closes the dispatcher's Redis connections last, once the services that use them have stopped
 * (they do so in onModuleDestroy and beforeApplicationShutdown).
 */
@Injectable()
export class RedisConnections implements OnApplicationShutdown {
  constructor(
    @Inject(REDIS) private readonly redis: Redis,
    @Inject(SUB_REDIS) private readonly sub: Redis,
    @Inject(RECORDS_REDIS) private readonly records: Redis,
  ) {}

  /** The command connection is quit (its pending replies arrive first); the blocking ones are cut. */
  async onApplicationShutdown(): Promise<void> {
    for (const connection of [this.sub, this.records]) {
      connection.disconnect();
    }
    await this.redis.quit().catch(() => this.redis.disconnect());
  }
}
