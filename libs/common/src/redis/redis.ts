import type { Socket } from 'node:net';
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

/**
 * The commands a process issues in one turn of the event loop leave in one socket write: the
 * connection's socket is corked at the first write of a turn and uncorked once the turn's I/O
 * callbacks have run (setImmediate), which sends everything buffered in one writev. A socket write
 * costs far more than the bytes in it (bench profile), and unlike ioredis's auto-pipelining this
 * never holds a command back while an earlier batch awaits its replies, keeps every command in the
 * order it was issued, and builds no Pipeline object per batch (which copies every script defined
 * on the connection, BullMQ's included).
 */
export function coalesceWrites(redis: Redis): Redis {
  redis.on('connect', () => {
    const stream = (redis as unknown as { stream: Socket }).stream;
    const write = stream.write.bind(stream) as (...args: unknown[]) => boolean;
    let corked = false;
    const uncork = () => {
      corked = false;
      stream.uncork();
    };
    stream.write = (...args: unknown[]) => {
      if (!corked) {
        corked = true;
        stream.cork();
        setImmediate(uncork);
      }
      return write(...args);
    };
  });
  return redis;
}
