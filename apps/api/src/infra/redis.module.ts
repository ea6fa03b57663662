import { Global, Inject, Module } from '@nestjs/common';
import type { OnApplicationShutdown } from '@nestjs/common';
import type { Redis } from 'ioredis';
import {
  APP_CONFIG,
  PrismaService,
  TASK_STREAM_TTL_S,
  TaskRepository,
  coalesceWrites,
  createBlockingRedis,
  createRedis,
} from '@app/common';
import type { AppConfig } from '@app/common';

/**
 * The api's Redis connections, a constant four. REDIS carries short commands: without an offline
 * queue, a command while Redis is unreachable fails at once, so the client gets a quick 503 instead of
 * a hanging request; the commands of all requests issued in one turn of the event loop leave in one
 * socket write (coalesceWrites: a write costs far more than the bytes in it).
 */
export const REDIS = Symbol('REDIS');
/** Blocking reads of the task streams this instance waits on. */
export const STREAMS_REDIS = Symbol('STREAMS_REDIS');
/** Blocking reads of the task records this instance writes to Postgres. */
export const RECORDS_REDIS = Symbol('RECORDS_REDIS');
/** Subscriber: presence changes. */
export const SUB_REDIS = Symbol('SUB_REDIS');

/** How long an ended task's state stays readable in Redis, while its record is written behind. */
export const ENDED_TTL_MS = 10 * 60_000;

@Global()
@Module({
  providers: [
    {
      provide: REDIS,
      inject: [APP_CONFIG],
      useFactory: (c: AppConfig) =>
        coalesceWrites(
          createRedis(c.REDIS_URL, {
            enableOfflineQueue: false,
            connectionName: 'switchyard-api',
          }),
        ),
    },
    {
      provide: STREAMS_REDIS,
      inject: [APP_CONFIG],
      useFactory: (c: AppConfig) => createBlockingRedis(c.REDIS_URL, { connectionName: 'switchyard-api-streams' }),
    },
    {
      provide: RECORDS_REDIS,
      inject: [APP_CONFIG],
      useFactory: (c: AppConfig) => createBlockingRedis(c.REDIS_URL, { connectionName: 'switchyard-api-records' }),
    },
    {
      provide: SUB_REDIS,
      inject: [APP_CONFIG],
      useFactory: (c: AppConfig) => createBlockingRedis(c.REDIS_URL, { connectionName: 'switchyard-api-sub' }),
    },
    {
      provide: TaskRepository,
      inject: [REDIS, APP_CONFIG, PrismaService],
      useFactory: (redis: Redis, c: AppConfig, db: PrismaService) =>
        new TaskRepository(
          redis,
          {
            liveTtlMs: c.QUEUE_TIMEOUT_MS + c.MAX_STREAM_MS + ENDED_TTL_MS,
            endedTtlMs: ENDED_TTL_MS,
            streamTtlS: TASK_STREAM_TTL_S,
          },
          db,
        ),
    },
  ],
  exports: [REDIS, STREAMS_REDIS, RECORDS_REDIS, SUB_REDIS, TaskRepository],
})
export class RedisModule implements OnApplicationShutdown {
  constructor(
    @Inject(REDIS) private readonly redis: Redis,
    @Inject(STREAMS_REDIS) private readonly streams: Redis,
    @Inject(RECORDS_REDIS) private readonly records: Redis,
    @Inject(SUB_REDIS) private readonly sub: Redis,
  ) {}

  /**
   * Last: the services that use them stop in earlier hooks. The command connection is quit (its
   * pending replies arrive first); the blocking ones are cut.
   */
  async onApplicationShutdown(): Promise<void> {
    for (const connection of [this.streams, this.records, this.sub]) {
      connection.disconnect();
    }
    await this.redis.quit().catch(() => this.redis.disconnect());
  }
}
