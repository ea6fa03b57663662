import { Inject, Injectable } from '@nestjs/common';
import type { OnApplicationShutdown, Provider } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { APP_CONFIG, createBlockingRedis, createRedis } from '@app/common';
import type { AppConfig } from '@app/common';

/**
 * Short commands (streams, presence, task writes), auto-pipelined: the stream entries of every task
 * written in one turn of the event loop go out in one socket write, which costs far more than the
 * bytes in it (bench profile).
 */
export const REDIS = Symbol('REDIS');
/** BullMQ's connection: it requires maxRetriesPerRequest null. */
export const BULL_REDIS = Symbol('BULL_REDIS');
/** A connection in subscriber mode for the api's nudges and cancels. */
export const SUB_REDIS = Symbol('SUB_REDIS');

export const redisProviders: Provider[] = [
  {
    provide: REDIS,
    inject: [APP_CONFIG],
    useFactory: (c: AppConfig) => createRedis(c.REDIS_URL, { enableAutoPipelining: true }),
  },
  { provide: BULL_REDIS, inject: [APP_CONFIG], useFactory: (c: AppConfig) => createBlockingRedis(c.REDIS_URL) },
  { provide: SUB_REDIS, inject: [APP_CONFIG], useFactory: (c: AppConfig) => createBlockingRedis(c.REDIS_URL) },
];

/**
 * Closes the dispatcher's Redis connections last, once the services that use them have stopped
 * (they do so in onModuleDestroy and beforeApplicationShutdown).
 */
@Injectable()
export class RedisConnections implements OnApplicationShutdown {
  constructor(
    @Inject(REDIS) private readonly redis: Redis,
    @Inject(BULL_REDIS) private readonly bull: Redis,
    @Inject(SUB_REDIS) private readonly sub: Redis,
  ) {}

  onApplicationShutdown(): void {
    for (const connection of [this.redis, this.bull, this.sub]) {
      connection.disconnect();
    }
  }
}
