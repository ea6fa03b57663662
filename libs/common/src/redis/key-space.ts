import { queueName, queueOfLine } from '../queues/queues';
import { keyPart, singleServerNames as names, tagged, untagged } from './keys';
import type { InstanceKind } from './keys';
import { CLUSTER_LAYOUT, SINGLE_LAYOUT, partitionCount, partitionOf, partitionTag } from './layout';
import type { RedisLayout } from './layout';

/**
 * The names of the keys that have a placement (keys.ts), for one layout. On a single server they are
 * the catalog's names. On a Redis Cluster each carries the hash tag of its partition, so that the keys a
 * script or a transaction touches together share a slot:
 *
 * - a task's state and stream, and the records stream, live set and held sets of its partition (the
 *   transition script touches all five);
 * - a queue's fair-share keys, service time and presence, and its lines' BullMQ keys (the BullMQ prefix
 *   carries the tag: BullMQ's scripts touch a line's keys, fair share's PICK the lines' wait lists),
 *   with the backlog set of the queue's partition;
 * - a device's live state; the instances of a kind and their set.
 *
 * The global streams and sets (records, live, held, backlog) are one per partition: whoever reads them
 * reads every partition ({@link partitions}).
 */
export class KeySpace {
  private static readonly spaces = new Map<RedisLayout, KeySpace>();

  /** The key space of a connection's layout: a cluster client's is the cluster layout. */
  static of(redis: { readonly isCluster: boolean }): KeySpace {
    return KeySpace.for(redis.isCluster ? CLUSTER_LAYOUT : SINGLE_LAYOUT);
  }

  static for(layout: RedisLayout): KeySpace {
    let space = KeySpace.spaces.get(layout);
    if (!space) {
      space = new KeySpace(layout);
      KeySpace.spaces.set(layout, space);
    }
    return space;
  }

  /** The partitions' numbers: [0] on a single server. */
  readonly partitions: readonly number[];

  private constructor(readonly layout: RedisLayout) {
    this.partitions = Array.from({ length: partitionCount(layout) }, (_, k) => k);
  }

  /** The partition of a task, a queue, a device or any other id. */
  partitionOf(id: string): number {
    return partitionOf(this.layout, id);
  }

  /** A single server's name as this layout has it in partition `k`. */
  private at(k: number, name: string): string {
    return this.layout.kind === 'single' ? name : tagged(partitionTag(this.layout, k), name);
  }

  /** A name in the partition of `id` (a task's, a queue's, a device's). */
  private of(id: string, name: string): string {
    return this.at(this.partitionOf(id), name);
  }

  /** A name in the partition of a line's queue (its keys are its queue's); the queue is found only on a cluster. */
  private ofLine(line: string, name: string): string {
    return this.layout.kind === 'single' ? name : this.of(queueOfLine(line), name);
  }

  /** A name in the partition of a (pool, model)'s queue. */
  private ofQueueOf(pool: string, model: string, name: string): string {
    return this.layout.kind === 'single' ? name : this.of(queueName(model, pool), name);
  }

  // Tasks.
  taskState(taskId: string): string {
    return this.of(taskId, names.taskState(taskId));
  }

  taskStream(taskId: string): string {
    return this.of(taskId, names.taskStream(taskId));
  }

  /** The records stream of partition `k` (a task's transitions go to its own partition's). */
  records(k: number): string {
    return this.at(k, names.records);
  }

  liveTasks(k: number): string {
    return this.at(k, names.liveTasks);
  }

  heldBy(dispatcherId: string, k: number): string {
    return this.at(k, names.heldBy(dispatcherId));
  }

  /** The mark that interrupts a reader's blocking read of partition `k`'s task streams (cluster only). */
  streamWake(readerId: string, k: number): string {
    return this.at(k, names.streamWake(readerId));
  }

  // Queues: a line's keys are its queue's.
  serviceTime(queue: string): string {
    return this.of(queue, names.serviceTime(queue));
  }

  presence(pool: string, model: string): string {
    return this.ofQueueOf(pool, model, names.presence(pool, model));
  }

  fairPasses(queue: string): string {
    return this.of(queue, names.fairPasses(queue));
  }

  fairState(queue: string): string {
    return this.of(queue, names.fairState(queue));
  }

  /** The queues with backlogged lines, of partition `k` (a queue's are in its own partition's). */
  backlog(k: number): string {
    return this.at(k, names.backlog);
  }

  /** BullMQ's prefix for the lines of a queue. */
  queuePrefix(queue: string): string {
    return this.of(queue, names.queuePrefix);
  }

  lineWait(line: string): string {
    return this.ofLine(line, names.lineWait(line));
  }

  lineActive(line: string): string {
    return this.ofLine(line, names.lineActive(line));
  }

  lineJob(line: string, jobId: string): string {
    return this.ofLine(line, names.lineJob(line, jobId));
  }

  lineJobLock(line: string, jobId: string): string {
    return this.ofLine(line, names.lineJobLock(line, jobId));
  }

  /** A SCAN pattern for the lines' active lists, and the line of a key it finds. */
  lineActiveScan(): { match: string; lineOf(key: string): string } {
    return {
      match: this.anyTag(names.lineActive('chat.*')),
      lineOf: (key) => keyPart(names.lineActive, this.untagged(key)),
    };
  }

  /** A SCAN pattern for the presence sets, and the (pool, model) of a key it finds. */
  presenceScan(): { match: string; placeOf(key: string): { pool: string; model: string } } {
    // A pool holds no `:`; a model id may.
    const name = (rest: string) => names.presence(rest, '').slice(0, -1);
    return {
      match: this.anyTag(name('*:*')),
      placeOf: (key) => {
        const [pool, ...model] = keyPart(name, this.untagged(key)).split(':');
        return { pool, model: model.join(':') };
      },
    };
  }

  /** A single server's name (a SCAN pattern) with any partition's tag. */
  private anyTag(name: string): string {
    return this.layout.kind === 'single' ? name : tagged('*', name);
  }

  /** A name of this layout as a single server has it. */
  private untagged(key: string): string {
    return this.layout.kind === 'single' ? key : untagged(key);
  }

  // Pub/Sub: on a cluster, sharded channels of the partition of what they announce.
  /** A line has a job waiting: the channel of its queue's partition. */
  jobsChannel(line: string): string {
    return this.ofLine(line, names.jobsChannel);
  }

  /** A task to stop: the channel of its partition. */
  cancelChannel(taskId: string): string {
    return this.of(taskId, names.cancelChannel);
  }

  /** The devices of a (pool, model) changed: the channel of its queue's partition. */
  presenceChannel(pool: string, model: string): string {
    return this.ofQueueOf(pool, model, names.presenceChannel);
  }

  /** Every partition's channel of one kind, for a subscriber that hears them all. */
  allChannels(kind: 'jobs' | 'cancel' | 'presence'): string[] {
    const name = { jobs: names.jobsChannel, cancel: names.cancelChannel, presence: names.presenceChannel }[kind];
    return this.partitions.map((k) => this.at(k, name));
  }

  // Devices and processes.
  deviceState(deviceId: string): string {
    return this.of(deviceId, names.deviceState(deviceId));
  }

  instance(kind: InstanceKind, id: string): string {
    return this.of(kind, names.instance(kind, id));
  }

  instances(kind: InstanceKind): string {
    return this.of(kind, names.instances(kind));
  }
}
