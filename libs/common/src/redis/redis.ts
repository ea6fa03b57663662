import { Redis } from 'ioredis';
import type { RedisOptions } from 'ioredis';

/**
 * A Redis connection for commands that should fail fast while Redis is unreachable
 * (requests, readiness), rather than queue up forever.
 */
export function createRedis(url: string, options: RedisOptions = {}): Redis {
  return new Redis(url, { maxRetriesPerRequest: 2, enableOfflineQueue: true, connectTimeout: 5_000, ...options });
}

/** A connection for BullMQ workers and blocking reads: BullMQ requires maxRetriesPerRequest null there. */
export function createBlockingRedis(url: string, options: RedisOptions = {}): Redis {
  return new Redis(url, { maxRetriesPerRequest: null, connectTimeout: 5_000, ...options });
}
