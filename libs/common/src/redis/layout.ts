import calculateSlot from 'cluster-key-slot';

/** Redis Cluster's hash slots, fixed by its protocol. */
export const CLUSTER_SLOTS = 16_384;

/**
 * How many partitions the keys are spread over on a Redis Cluster: a fixed number, part of every
 * partitioned key's name (changing it strands the data of a running deployment). Sixteen spread evenly
 * over 2, 4, 8 or 16 masters.
 */
export const CLUSTER_PARTITIONS = 16;

/**
 * How Switchyard's keys are laid out. `single`: one Redis server, every name as it always was, one
 * partition. `cluster`: a Redis Cluster; the keys that a script or a transaction touches together carry
 * one hash tag (`{…}`), the tag of their partition, so that they share a slot; the global sets and
 * streams are one per partition, so that their load spreads over the masters.
 */
export type RedisLayout = { readonly kind: 'single' } | { readonly kind: 'cluster'; readonly partitions: number };

export const SINGLE_LAYOUT: RedisLayout = { kind: 'single' };
export const CLUSTER_LAYOUT: RedisLayout = { kind: 'cluster', partitions: CLUSTER_PARTITIONS };

/** The number of partitions of a layout: 1 on a single server. */
export function partitionCount(layout: RedisLayout): number {
  return layout.kind === 'single' ? 1 : layout.partitions;
}

/** The partition an id belongs to (a task's, a queue's, a device's): its slot, modulo the partitions. */
export function partitionOf(layout: RedisLayout, id: string): number {
  return layout.kind === 'single' ? 0 : calculateSlot(id) % layout.partitions;
}

/**
 * The hash tag of partition `k` of `n`: the first of `k`, `k.1`, `k.2` … whose slot lies in the k-th
 * n-th of the slot range, so that the partitions' slots are evenly spaced and `redis-cli --cluster
 * create`'s even split of the slots gives each master as many partitions as the next.
 */
function findTag(k: number, n: number): string {
  const [low, high] = [(k * CLUSTER_SLOTS) / n, ((k + 1) * CLUSTER_SLOTS) / n];
  for (let i = 0; ; i++) {
    const tag = i === 0 ? String(k) : `${k}.${i}`;
    const slot = calculateSlot(tag);
    if (slot >= low && slot < high) {
      return tag;
    }
  }
}

const tags = new Map<string, string>();

/** The hash tag (without its braces) of partition `k` of a cluster layout. */
export function partitionTag(layout: RedisLayout & { kind: 'cluster' }, k: number): string {
  if (!Number.isInteger(k) || k < 0 || k >= layout.partitions) {
    throw new RangeError(`no partition ${k} of ${layout.partitions}`);
  }
  const id = `${k}/${layout.partitions}`;
  let tag = tags.get(id);
  if (tag === undefined) {
    tag = findTag(k, layout.partitions);
    tags.set(id, tag);
  }
  return tag;
}
