import { Cluster } from 'ioredis';
import type { Pool } from 'pg';
import { FairShare, KeySpace, TaskRecordWriter, TaskRepository, createLogger } from '@app/common';
import type { SqlRunner } from '@app/common';
import { startEmbeddedRedisCluster } from '../../../apps/cli/src/embedded/embedded-redis-cluster';
import type { ClusterMaster, EmbeddedRedisCluster } from '../../../apps/cli/src/embedded/embedded-redis-cluster';
import { createPool } from '../../../libs/common/src/prisma/pool';
import { DATABASE_URL, closeDb, db, sleep, uniq } from '../../support/stack';
import { TestQueue } from '../queues/test-queue';
import { TASK_TTLS, createTaskOwners, newTaskOf } from '../tasks/task-fixture';
import type { TaskOwners } from '../tasks/task-fixture';

/**
 * The stores on a real Redis Cluster (3 masters): a cluster client names the keys for the cluster
 * (KeySpace.of), so that the task transitions and fair share, whose scripts touch several keys, run
 * where single-slot rules hold; the records streams, one per partition, are written to Postgres by a
 * writer per partition; and the load spreads over the masters.
 */

/** The master that serves `slot`. */
function holderOf(masters: ClusterMaster[], slot: number): number | undefined {
  return masters.find((master) => master.slots.some(([first, last]) => slot >= first && slot <= last))?.port;
}

describe('the stores on a Redis Cluster', () => {
  let cluster: EmbeddedRedisCluster;
  let client: Cluster;
  let pool: Pool;
  let sql: SqlRunner;
  let owners: TaskOwners;
  const writers: TaskRecordWriter[] = [];

  beforeAll(async () => {
    cluster = await startEmbeddedRedisCluster({ masters: 3, replicasPerMaster: 0 });
    client = new Cluster(cluster.nodes);
    pool = createPool(DATABASE_URL, 2);
    sql = { sql: (text, values) => pool.query(text, values) };
    owners = await createTaskOwners('medium-cluster', 2);
  });

  afterAll(async () => {
    await Promise.all(writers.map((writer) => writer.stop()));
    client?.disconnect();
    await cluster?.stop();
    await pool?.end();
    await closeDb();
  });

  it('names its keys for the cluster: hash tags of 16 partitions', () => {
    const keys = KeySpace.of(client);
    expect(keys.partitions).toHaveLength(16);
    expect(keys.records(0)).toMatch(/^sy:\{[0-9.]+\}:records$/);
  });

  it('runs tasks from creation to their ending on every partition, and a writer per partition writes their records', async () => {
    const keys = KeySpace.of(client);
    const tasks = new TaskRepository(client, { ...TASK_TTLS, dispatcherId: 'cluster-disp' }, sql);
    const created = Array.from({ length: 48 }, () => newTaskOf(owners));
    for (const task of created) {
      expect(await tasks.create(task)).toEqual({ ok: true, attempt: 0 });
      expect(
        await tasks.claim(task.id, {
          deviceId: owners.deviceIds[0],
          modelDigest: null,
          dispatcherId: 'cluster-disp',
          token: 't',
        }),
      ).toEqual({ ok: true, attempt: 1 });
    }
    expect((await tasks.heldBy('cluster-disp')).sort()).toEqual(created.map((t) => t.id).sort());

    // Each task's state lives on the master of its partition's slot; together they use every master.
    const masters = await cluster.masters();
    const used = new Set<number>();
    for (const task of created) {
      const slot = Number(await client.cluster('KEYSLOT', keys.taskState(task.id)));
      expect(slot).toBe(Number(await client.cluster('KEYSLOT', keys.records(keys.partitionOf(task.id)))));
      used.add(holderOf(masters, slot)!);
    }
    expect(used.size).toBe(3);
    expect(new Set(created.map((t) => keys.partitionOf(t.id))).size).toBeGreaterThan(8);

    for (const task of created) {
      const first = await tasks.firstOutput(task.id, 1, ['a', '1', 's', '1', 'e', '[]']);
      expect(first).toEqual({ ok: true, attempt: 1 });
      const ended = await tasks.end(task.id, { status: 'completed', finishReason: 'stop' }, { attempt: 1 });
      expect(ended).toEqual({ ok: true, attempt: 1 });
    }
    expect(await tasks.heldBy('cluster-disp')).toEqual([]);
    expect(await tasks.overdue(Date.now() + 3_600_000, 100)).toEqual([]);

    // A writer per partition, each blocking on a connection of its own.
    for (const k of keys.partitions) {
      const writer = new TaskRecordWriter(client.duplicate(), sql, createLogger('test', 'silent'), uniq('writer'), k);
      writer.start();
      writers.push(writer);
    }
    const ids = created.map((t) => t.id);
    const deadline = Date.now() + 15_000;
    for (;;) {
      const rows = await db().task.findMany({ where: { id: { in: ids } }, select: { status: true } });
      if (rows.length === ids.length && rows.every((row) => row.status === 'completed')) {
        break;
      }
      if (Date.now() > deadline) {
        throw new Error(`${rows.filter((row) => row.status === 'completed').length} of ${ids.length} records written`);
      }
      await sleep(50);
    }
  }, 60_000);

  it('serves a queue of several lines in fair turns: its keys and its lines’ BullMQ keys share a slot', async () => {
    const fair = new FairShare(client);
    const queue = new TestQueue(client, fair);
    await queue.backlog('a', 1, 4);
    await queue.backlog('b', 3, 12);
    const served = await queue.serve(16);
    expect(served.filter((org) => org === 'a')).toHaveLength(4);
    expect(served.filter((org) => org === 'b')).toHaveLength(12);
    // b (weight 3) takes three turns to a's one while both stand.
    expect(served.slice(0, 8).filter((org) => org === 'a')).toHaveLength(2);
    expect(await queue.next()).toBeNull();
    expect(await fair.backlogged()).not.toContain(queue.queue);
  });
});
