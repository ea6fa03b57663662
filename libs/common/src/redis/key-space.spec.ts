import calculateSlot from 'cluster-key-slot';
import { lineName, queueName } from '../queues/queues';
import { KeySpace } from './key-space';
import { CLUSTER_LAYOUT, CLUSTER_SLOTS, SINGLE_LAYOUT } from './layout';

const cluster = KeySpace.for(CLUSTER_LAYOUT);
const slot = (key: string) => calculateSlot(key);

/** A BullMQ key of a line, as BullMQ builds it from the prefix it is given: `<prefix>:<queue name>:<key>`. */
const bullmq = (space: KeySpace, line: string, key: string) =>
  `${space.queuePrefix(line.slice(0, line.lastIndexOf('.')))}:${line}:${key}`;

describe('KeySpace', () => {
  it('is the layout of the connection: a cluster client gets the cluster layout', () => {
    expect(KeySpace.of({ isCluster: false })).toBe(KeySpace.for(SINGLE_LAYOUT));
    expect(KeySpace.of({ isCluster: true })).toBe(cluster);
    expect(cluster.partitions).toHaveLength(16);
  });

  it("puts a task's state and stream in the slot of its partition's records, live set and held sets (the transition script's keys)", () => {
    for (let i = 0; i < 200; i++) {
      const taskId = `3f2a${i}-task`;
      const k = cluster.partitionOf(taskId);
      const slots = new Set(
        [
          cluster.taskState(taskId),
          cluster.taskStream(taskId),
          cluster.records(k),
          cluster.liveTasks(k),
          cluster.heldBy('dispatcher-1', k),
        ].map(slot),
      );
      expect([taskId, slots.size]).toEqual([taskId, 1]);
    }
  });

  it("puts a queue's fair-share keys, presence, service time, backlog and its lines' BullMQ keys in one slot", () => {
    for (const model of ['llama3.2:3b', 'qwen2.5:7b', 'nomic/embed.v1']) {
      const queue = queueName(model, 'network');
      const lines = ['org-a', 'org-b', 'org-c'].map((org) => lineName(queue, org));
      const keys = [
        cluster.fairPasses(queue),
        cluster.fairState(queue),
        cluster.serviceTime(queue),
        cluster.presence('network', model),
        cluster.backlog(cluster.partitionOf(queue)),
        ...lines.flatMap((line) => [
          cluster.lineWait(line),
          cluster.lineActive(line),
          cluster.lineJob(line, 'task-1'),
          cluster.lineJobLock(line, 'task-1'),
          bullmq(cluster, line, 'meta'),
          bullmq(cluster, line, 'events'),
        ]),
      ];
      expect([model, new Set(keys.map(slot)).size]).toEqual([model, 1]);
      // The names BullMQ builds are the ones the catalog names.
      expect(bullmq(cluster, lines[0], 'wait')).toBe(cluster.lineWait(lines[0]));
    }
  });

  it('spreads tasks, queues and devices over the partitions, and the partitions over the slot range', () => {
    const used = new Set(Array.from({ length: 2_000 }, (_, i) => cluster.partitionOf(`task-${i}`)));
    expect(used.size).toBe(16);
    const partitionSlots = cluster.partitions.map((k) => slot(cluster.records(k)));
    partitionSlots.forEach((s, k) => {
      expect(Math.floor((s * 16) / CLUSTER_SLOTS)).toBe(k);
    });
    expect(slot(cluster.instance('dispatcher', 'a'))).toBe(slot(cluster.instances('dispatcher')));
    for (const device of ['d-1', 'd-2', 'd-3']) {
      expect(slot(cluster.deviceState(device))).toBe(slot(cluster.records(cluster.partitionOf(device))));
    }
  });

  it('finds the keys of every partition by one SCAN pattern, and reads their parts back', () => {
    const lines = cluster.lineActiveScan();
    const line = lineName(queueName('llama3.2:3b', 'network'), 'org-a');
    expect(lines.match).toBe('sy:{*}:chat.*:active');
    expect(lines.lineOf(cluster.lineActive(line))).toBe(line);
    const presence = cluster.presenceScan();
    expect(presence.match).toBe('sy:{*}:presence:*:*');
    expect(presence.placeOf(cluster.presence('org-1', 'llama3.2:3b'))).toEqual({ pool: 'org-1', model: 'llama3.2:3b' });
  });
});
