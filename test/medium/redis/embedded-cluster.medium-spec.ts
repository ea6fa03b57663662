import { existsSync } from 'node:fs';
import { Cluster } from 'ioredis';
import type { Redis } from 'ioredis';
import { startEmbeddedRedisCluster } from '../../../apps/cli/src/embedded/embedded-redis-cluster';
import type { ClusterMaster, EmbeddedRedisCluster } from '../../../apps/cli/src/embedded/embedded-redis-cluster';
import { uniq } from '../../support/stack';

/**
 * The embedded Redis Cluster that the cluster tests, the bench and the demo start: a cluster client
 * finds its masters, its keys are spread over them by slot, a killed master's replica takes over its
 * slots (and keys) within seconds, and a stop leaves no process behind.
 */

/** Generous: at cluster-node-timeout 1000 a failover takes a few seconds; a loaded CI machine, more. */
const FAILOVER_TIMEOUT_MS = 20_000;
/** One attempt of a poll: a command to a node that just died may otherwise wait for its reconnection. */
const ATTEMPT_TIMEOUT_MS = 2_000;

/** Polls `attempt` until it returns a value (not undefined); fails at the deadline with its last error. */
async function until<T>(attempt: () => Promise<T | undefined>, what: string, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last = 'no answer yet';
  for (;;) {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`an attempt took over ${ATTEMPT_TIMEOUT_MS} ms`)), ATTEMPT_TIMEOUT_MS);
    });
    try {
      const value = await Promise.race([attempt(), timeout]);
      if (value !== undefined) {
        return value;
      }
    } catch (error) {
      last = (error as Error).message;
    } finally {
      clearTimeout(timer);
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${last})`);
    }
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/** Whether a process of this id is there (signal 0 only asks). */
function exists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code !== 'ESRCH';
  }
}

/** The master that serves `slot`. */
function holderOf(masters: ClusterMaster[], slot: number): ClusterMaster | undefined {
  return masters.find((master) => master.slots.some(([first, last]) => slot >= first && slot <= last));
}

/** The cluster client's own connection to the node on `port`. */
function connectionTo(client: Cluster, port: number): Redis {
  const node = client.nodes('master').find((redis) => redis.options.port === port);
  if (!node) {
    throw new Error(`the cluster client has no connection to master ${port}`);
  }
  return node;
}

describe('an embedded Redis Cluster', () => {
  let cluster: EmbeddedRedisCluster;
  let client: Cluster;

  beforeAll(async () => {
    // Its ports are the kernel's picks, outside the test runs' blocks (see freePort in test/support/stack.ts),
    // which keep runs apart by the Redis database they claim: two runs on embedded Redis servers of their
    // own both claim database 1, and would share a block.
    cluster = await startEmbeddedRedisCluster({ masters: 3, replicasPerMaster: 1 });
    client = new Cluster(cluster.nodes);
  });

  afterAll(async () => {
    client?.disconnect();
    await cluster?.stop();
  });

  it('has 3 masters and its seeds list every node', async () => {
    const masters = await cluster.masters();
    expect(masters).toHaveLength(3);
    expect(cluster.nodes).toHaveLength(6);
    expect(cluster.seeds).toBe(cluster.nodes.map(({ host, port }) => `${host}:${port}`).join(','));
    expect(cluster.processes().every((node) => node.running)).toBe(true);
  });

  it('keeps keys of different hash tags on different masters', async () => {
    const masters = await cluster.masters();
    const keys = Array.from({ length: 12 }, (_, i) => `{${uniq(`tag${i}`)}}:value`);
    const holders = new Set<number>();
    for (const key of keys) {
      await client.set(key, key);
      const slot = Number(await client.cluster('KEYSLOT', key));
      const holder = holderOf(masters, slot);
      expect(holder).toBeDefined();
      holders.add(holder!.port);
      // Asked of that master alone (another would answer MOVED): the key is where its slot says.
      expect(await connectionTo(client, holder!.port).get(key)).toBe(key);
    }
    expect(holders.size).toBeGreaterThanOrEqual(2);
  });

  it("fails a killed master over to its replica, which serves the master's keys", async () => {
    const key = `{${uniq('failover')}}:value`;
    await client.set(key, 'before');
    const slot = Number(await client.cluster('KEYSLOT', key));
    const victim = holderOf(await cluster.masters(), slot)!;
    // Replication is asynchronous: the write is on a replica before its master dies.
    expect(await connectionTo(client, victim.port).wait(1, 5_000)).toBeGreaterThanOrEqual(1);

    await cluster.kill(victim.port);
    expect(cluster.processes().find((node) => node.port === victim.port)?.running).toBe(false);

    const successor = await until(
      async () => {
        const holder = holderOf(await cluster.masters(), slot);
        return holder && holder.port !== victim.port ? holder : undefined;
      },
      `a replica of ${victim.port} to serve slot ${slot}`,
      FAILOVER_TIMEOUT_MS,
    );
    expect(cluster.processes().find((node) => node.port === successor.port)?.running).toBe(true);
    await until(
      async () => ((await client.get(key)) === 'before' ? true : undefined),
      `${key} to be readable through the cluster client`,
      FAILOVER_TIMEOUT_MS,
    );
    await until(
      async () => ((await client.set(key, 'after')) === 'OK' ? true : undefined),
      `${key} to be writable through the cluster client`,
      FAILOVER_TIMEOUT_MS,
    );
    expect(await connectionTo(client, successor.port).get(key)).toBe('after');
  });

  it('stops every process and removes its data directory', async () => {
    client.disconnect();
    const pids = cluster.processes().map((node) => node.pid);
    await cluster.stop();
    expect(cluster.processes().filter((node) => node.running)).toEqual([]);
    expect(pids.filter(exists)).toEqual([]);
    expect(existsSync(cluster.dataDir)).toBe(false);
  });
});
