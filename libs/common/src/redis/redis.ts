import { Redis } from 'ioredis';
import type { RedisOptions } from 'ioredis';

/**
 * Connecting may take 5 s; a connection being closed is cut after 200 ms if Redis has not closed it
 * by then (a blocked read): shutdown is not held up by it.
 */
const COMMON: RedisOptions = { connectTimeout: 5_000, disconnectTimeout: 200 };

/**
 * A Redis connection for commands that should fail fast while Redis is unreachable
 * (requests, readiness), rather than queue up forever.
 */
export function createRedis(url: string, options: RedisOptions = {}): Redis {
  return new Redis(url, { maxRetriesPerRequest: 2, enableOfflineQueue: true, ...COMMON, ...options });
}

/** A connection for BullMQ workers and blocking reads: BullMQ requires maxRetriesPerRequest null there. */
export function createBlockingRedis(url: string, options: RedisOptions = {}): Redis {
  return new Redis(url, { maxRetriesPerRequest: null, ...COMMON, ...options });
}
