import { randomUUID } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import type { OnApplicationShutdown } from '@nestjs/common';
import { KeySpace, LOGGER, REDIS, STREAMS_REDIS } from '@app/common';
import type { Logger, RedisClient } from '@app/common';
import { PartitionStreamReader } from './partition-stream-reader';
import type { Listener, StreamSubscription } from './partition-stream-reader';

export type { StreamSubscription } from './partition-stream-reader';

/**
 * Reads the event streams of every task this api instance is waiting on. On a single server, one
 * PartitionStreamReader reads them all on the streams connection. On a cluster, a blocking read may
 * only name keys of one slot: each partition with a stream to read gets a reader of its own, on a
 * connection of its own (opened on first use), interrupted by its partition's wake mark.
 */
@Injectable()
export class TaskStreamReader implements OnApplicationShutdown {
  private readonly keys: KeySpace;
  private readonly readers = new Map<number, PartitionStreamReader>();
  /** Names this api's wake marks (a cluster's interruptions). */
  private readonly id = randomUUID();

  constructor(
    @Inject(REDIS) private readonly redis: RedisClient,
    @Inject(STREAMS_REDIS) private readonly conn: RedisClient,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {
    this.keys = KeySpace.of(redis);
  }

  /** Calls `listener` with each entry of the task's stream, in order, from the beginning. */
  subscribe(taskId: string, listener: Listener): StreamSubscription {
    return this.readerOf(this.keys.partitionOf(taskId)).subscribe(this.keys.taskStream(taskId), listener);
  }

  private readerOf(k: number): PartitionStreamReader {
    let reader = this.readers.get(k);
    if (!reader) {
      const first = this.readers.size === 0;
      const wake = this.redis.isCluster ? this.keys.streamWake(this.id, k) : null;
      reader = new PartitionStreamReader(first ? this.conn : this.conn.duplicate(), this.redis, wake, this.logger);
      this.readers.set(k, reader);
    }
    return reader;
  }

  async onApplicationShutdown(): Promise<void> {
    await Promise.all([...this.readers.values()].map((reader) => reader.stop()));
    if (this.readers.size === 0) {
      this.conn.disconnect();
    }
  }
}
