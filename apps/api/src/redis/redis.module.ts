import { Global, Inject, Module } from '@nestjs/common';
import type { OnApplicationShutdown } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { APP_CONFIG, createRedis } from '@app/common';
import type { AppConfig } from '@app/common';

export const REDIS = Symbol('REDIS');

/**
 * The api's shared Redis connection for short commands. Without an offline queue, a command while
 * Redis is unreachable fails at once, so the client gets a quick 503 instead of a hanging request.
 * Auto-pipelining sends the commands of all requests issued in one turn of the event loop in one
 * socket write: a write costs far more than the bytes in it (bench profile).
 */
@Global()
@Module({
  providers: [
    {
      provide: REDIS,
      inject: [APP_CONFIG],
      useFactory: (c: AppConfig) => createRedis(c.REDIS_URL, { enableOfflineQueue: false, enableAutoPipelining: true }),
    },
  ],
  exports: [REDIS],
})
export class RedisModule implements OnApplicationShutdown {
  constructor(@Inject(REDIS) private readonly redis: Redis) {}

  onApplicationShutdown(): void {
    this.redis.disconnect();
  }
}
