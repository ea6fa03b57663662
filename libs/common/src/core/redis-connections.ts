import type { OnApplicationShutdown, Provider } from '@nestjs/common';
import { APP_CONFIG } from '../config/config';
import type { AppConfig } from '../config/config';
import { redisTargetOf } from '../config/config';
import type { RedisTarget } from '../config/config';
import { coalesceWrites, connectRedis } from '../redis/redis';
import type { RedisClient } from '../redis/redis';

/*
 * The roles of the Redis connections, as Nest injection tokens. A process's connections are a
 * constant, whatever the number of requests, devices or queues: each process lists the ones it opens
 * (RedisConnectionSpec) when it imports the CoreModule.
 */

/**
 * Short commands (task transitions, streams, fair share, presence, limits), with coalesced writes: the
 * commands issued in one turn of the event loop leave in one socket write (see coalesceWrites). Every
 * process has it; the core's task repository, liveness and readiness use it.
 */
export const REDIS = Symbol('REDIS');
/** The task record writer's blocking reads (every api and dispatcher runs one writer). */
export const RECORDS_REDIS = Symbol('RECORDS_REDIS');
/** A connection in subscriber mode: the api's presence changes; the dispatcher's jobs waiting and cancels. */
export const SUB_REDIS = Symbol('SUB_REDIS');
/** The api's blocking reads of the task streams its requests wait on. */
export const STREAMS_REDIS = Symbol('STREAMS_REDIS');
/**
 * The dispatcher's BullMQ lines: taking, finishing and putting back jobs. A connection of their own
 * because BullMQ defines its 52 scripts as commands of the connection it is given, and ioredis copies
 * every command of a connection onto each pipeline it makes: 57 µs per pipeline instead of 9 (a tenth
 * of the dispatcher's CPU at 200 requests/s, profile). Its writes are coalesced like the command
 * connection's.
 */
export const LINES_REDIS = Symbol('LINES_REDIS');

/** One Redis connection a process opens. */
export interface RedisConnectionSpec {
  /** The role it is injected by (REDIS, RECORDS_REDIS, SUB_REDIS, STREAMS_REDIS, LINES_REDIS). */
  token: symbol;
  /** Its client name in Redis (CLIENT LIST), so that an operator can tell whose each connection is. */
  name: string;
  /**
   * `commands`: short commands, writes coalesced per turn of the event loop, at most two retries each.
   * `blocking`: blocking reads, which wait as long as they must (no retry limit).
   * `subscriber`: a subscription, as blocking; on a cluster it subscribes to sharded channels on every master.
   */
  use: 'commands' | 'blocking' | 'subscriber';
  /**
   * Commands only. False: a command while Redis is unreachable fails at once instead of waiting for
   * the connection (the api, so that a client gets a quick 503 rather than a hanging request).
   */
  offlineQueue?: boolean;
}

function open(spec: RedisConnectionSpec, target: RedisTarget): RedisClient {
  if (spec.use !== 'commands') {
    return connectRedis(target, 'blocking', { connectionName: spec.name }, { subscriber: spec.use === 'subscriber' });
  }
  return coalesceWrites(
    connectRedis(target, 'commands', { connectionName: spec.name, enableOfflineQueue: spec.offlineQueue ?? true }),
  );
}

/** Closes a process's Redis connections, last: the services that use them stop in earlier hooks. */
export class RedisConnections implements OnApplicationShutdown {
  constructor(private readonly connections: readonly { spec: RedisConnectionSpec; redis: RedisClient }[]) {}

  /** The blocking ones are cut; the command ones are quit (their pending replies arrive first). */
  async onApplicationShutdown(): Promise<void> {
    for (const { spec, redis } of this.connections) {
      if (spec.use !== 'commands') {
        redis.disconnect();
      }
    }
    await Promise.all(
      this.connections
        .filter(({ spec }) => spec.use === 'commands')
        .map(({ redis }) => redis.quit().catch(() => redis.disconnect())),
    );
  }
}

/** The providers of the connections, by their tokens, and of the RedisConnections that closes them. */
export function redisConnectionProviders(specs: readonly RedisConnectionSpec[]): Provider[] {
  return [
    ...specs.map((spec): Provider => ({
      provide: spec.token,
      inject: [APP_CONFIG],
      useFactory: (config: AppConfig) => open(spec, redisTargetOf(config)),
    })),
    {
      provide: RedisConnections,
      inject: specs.map((spec) => spec.token),
      useFactory: (...connections: RedisClient[]) =>
        new RedisConnections(specs.map((spec, i) => ({ spec, redis: connections[i] }))),
    },
  ];
}
