import type { Cluster, Redis } from 'ioredis';

/**
 * The keys matching a pattern, in pages of up to `count` as SCAN returns them. On a cluster SCAN walks
 * one node's keys, so every master is walked in turn.
 */
export async function* scanKeys(redis: Redis | Cluster, match: string, count = 1000): AsyncGenerator<string[]> {
  const nodes = redis.isCluster ? (redis as Cluster).nodes('master') : [redis as Redis];
  for (const node of nodes) {
    let cursor = '0';
    do {
      const [next, found] = await node.scan(cursor, 'MATCH', match, 'COUNT', count);
      cursor = next;
      if (found.length > 0) {
        yield found;
      }
    } while (cursor !== '0');
  }
}
