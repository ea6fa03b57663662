import { Inject, Injectable } from '@nestjs/common';
import type { OnApplicationShutdown, Provider } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { APP_CONFIG, coalesceWrites, createBlockingRedis, createRedis } from '@app/common';
import type { AppConfig } from '@app/common';

/**
 * The dispatcher's Redis connections: a constant four, whatever the number of devices, models or
 * queues (BullMQ's lines all share one, see LineQueue).
 *
 * Short commands (streams, transitions, fair share, presence, device states), with coalesced writes:
 * the commands of every task issued in one turn of the event loop go out in one socket write, which
 * costs far more than the bytes in it (see coalesceWrites).
 */
export const REDIS = Symbol('REDIS');
/**
 * BullMQ's lines: taking, finishing and putting back jobs. A connection of their own because BullMQ
 * defines its 52 scripts as commands of the connection it is given, and ioredis copies every command
 * of a connection onto each pipeline it makes: 57 µs per pipeline instead of 9, and auto-pipelining
 * makes one per turn of the event loop that sends anything (a tenth of the dispatcher's CPU at 200
 * requests/s, profile). Its writes are coalesced per turn like the command connection's.
 */
export const LINES_REDIS = Symbol('LINES_REDIS');
/** A connection in subscriber mode: jobs waiting, cancels. */
export const SUB_REDIS = Symbol('SUB_REDIS');
/** The task record writer's blocking reads. */
export const RECORDS_REDIS = Symbol('RECORDS_REDIS');

export const redisProviders: Provider[] = [
  {
    provide: REDIS,
    inject: [APP_CONFIG],
    useFactory: (c: AppConfig) => coalesceWrites(createRedis(c.REDIS_URL, { connectionName: 'switchyard-dispatcher' })),
  },
  {
    provide: LINES_REDIS,
    inject: [APP_CONFIG],
    useFactory: (c: AppConfig) =>
      coalesceWrites(createRedis(c.REDIS_URL, { connectionName: 'switchyard-dispatcher-lines' })),
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
    @Inject(LINES_REDIS) private readonly lines: Redis,
    @Inject(SUB_REDIS) private readonly sub: Redis,
    @Inject(RECORDS_REDIS) private readonly records: Redis,
  ) {}

  /** The command connections are quit (their pending replies arrive first); the blocking ones are cut. */
  async onApplicationShutdown(): Promise<void> {
    for (const connection of [this.sub, this.records]) {
      connection.disconnect();
    }
    await Promise.all(
      [this.redis, this.lines].map((connection) => connection.quit().catch(() => connection.disconnect())),
    );
  }
}
