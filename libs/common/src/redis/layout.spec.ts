import calculateSlot from 'cluster-key-slot';
import { CLUSTER_LAYOUT, CLUSTER_SLOTS, SINGLE_LAYOUT, partitionCount, partitionOf, partitionTag } from './layout';
import type { RedisLayout } from './layout';

describe('Redis layouts', () => {
  const cluster = CLUSTER_LAYOUT as RedisLayout & { kind: 'cluster' };

  it('a single server has one partition, which every id belongs to', () => {
    expect(partitionCount(SINGLE_LAYOUT)).toBe(1);
    expect(['a', 'task-1', 'chat.network.m'].map((id) => partitionOf(SINGLE_LAYOUT, id))).toEqual([0, 0, 0]);
  });

  it("a cluster's partition tags are evenly spaced over the slots: partition k's slot is in the k-th sixteenth", () => {
    const slots = Array.from({ length: cluster.partitions }, (_, k) => calculateSlot(`{${partitionTag(cluster, k)}}`));
    const width = CLUSTER_SLOTS / cluster.partitions;
    expect(slots.map((slot) => Math.floor(slot / width))).toEqual(Array.from({ length: 16 }, (_, k) => k));
    // Three masters of redis-cli's even split (0-5460, 5461-10922, 10923-16383) get 5 or 6 partitions each.
    const perMaster = [5461, 10923, CLUSTER_SLOTS].map((end, i, ends) =>
      slots.filter((s) => s < end && s >= (i === 0 ? 0 : ends[i - 1])),
    );
    expect(perMaster.map((s) => s.length)).toEqual([6, 5, 5]);
  });

  it('spreads ids over the partitions, each id always to the same one', () => {
    const counts = new Array<number>(cluster.partitions).fill(0);
    for (let i = 0; i < 16_000; i++) {
      counts[partitionOf(cluster, `task-${i}`)]++;
    }
    expect(Math.min(...counts)).toBeGreaterThan(800);
    expect(Math.max(...counts)).toBeLessThan(1_200);
    expect(partitionOf(cluster, 'task-42')).toBe(partitionOf(cluster, 'task-42'));
  });

  it('refuses a partition the layout does not have', () => {
    expect(() => partitionTag(cluster, 16)).toThrow(RangeError);
    expect(() => partitionTag(cluster, -1)).toThrow(RangeError);
  });
});
