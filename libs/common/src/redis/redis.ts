import type { Socket } from 'node:net';
import { Cluster, Redis } from 'ioredis';
import type { ClusterOptions, RedisOptions } from 'ioredis';
import type { ClusterNode, RedisTarget } from '../config/config';

/**
 * A connection to Redis: to a single server, or a Redis Cluster client (which routes each command to the
 * master of its key's slot). The stores take either; their key names follow it (KeySpace.of).
 */
export type RedisClient = Redis | Cluster;

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
 * A client of a Redis Cluster. Every command goes to the master of its key's slot (reads included:
 * a replica may lag, and the stores read what they just wrote); ioredis follows MOVED and ASK, and
 * while a master fails over it retries (retryDelayOnFailover, retryDelayOnClusterDown) until its
 * replica is promoted. `use` as for a single server: `blocking` never gives up a command.
 */
export function createRedisCluster(
  nodes: readonly ClusterNode[],
  use: 'commands' | 'blocking',
  options: RedisOptions & Pick<ClusterOptions, 'enableOfflineQueue'> = {},
  cluster: { subscriber?: boolean } = {},
): Cluster {
  const { enableOfflineQueue = true, ...redisOptions } = options;
  return new Cluster([...nodes], {
    scaleReads: 'master',
    enableOfflineQueue,
    // A subscriber to sharded channels (SSUBSCRIBE) listens on every master, each for its own slots.
    shardedSubscribers: cluster.subscriber ?? false,
    redisOptions: { ...COMMON, maxRetriesPerRequest: use === 'blocking' ? null : 2, ...redisOptions },
  });
}

/** A connection to the target: a single server's, or a cluster client. */
export function connectRedis(
  target: RedisTarget,
  use: 'commands' | 'blocking',
  options: RedisOptions & Pick<ClusterOptions, 'enableOfflineQueue'> = {},
  cluster: { subscriber?: boolean } = {},
): RedisClient {
  if ('nodes' in target) {
    return createRedisCluster(target.nodes, use, options, cluster);
  }
  return use === 'blocking' ? createBlockingRedis(target.url, options) : createRedis(target.url, options);
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
export function coalesceWrites<C extends RedisClient>(client: C): C {
  if (client instanceof Cluster) {
    // A cluster client writes to each master on a connection of its own: each is coalesced.
    client.on('+node', (node: Redis) => coalesceWrites(node));
    return client;
  }
  client.on('connect', () => {
    const stream = (client as unknown as { stream: Socket }).stream;
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
  return client;
}
