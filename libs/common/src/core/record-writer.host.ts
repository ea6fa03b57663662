import { Inject, Injectable } from '@nestjs/common';
import type { RedisClient } from '../redis/redis';
import type { BeforeApplicationShutdown, OnModuleInit } from '@nestjs/common';
import { LOGGER } from '../logging/logger';
import type { Logger } from '../logging/logger';
import { PgService } from '../prisma/pg.service';
import { KeySpace } from '../redis/key-space';
import { TaskRecordWriter } from '../tasks/task-record-writer';
import { InstanceService } from './instance.service';
import { RECORDS_REDIS } from './redis-connections';

/**
 * Runs this process's writers of task records, consumer `<kind>-<instance id>` (every api and
 * dispatcher runs one per partition of the records stream, see TaskRecordWriter): on a single server
 * one, on the records connection; on a cluster one per partition, each blocking on a connection of its
 * own.
 */
@Injectable()
export class RecordWriterHost implements OnModuleInit, BeforeApplicationShutdown {
  private readonly writers: TaskRecordWriter[];

  constructor(
    @Inject(RECORDS_REDIS) redis: RedisClient,
    @Inject(PgService) db: PgService,
    @Inject(InstanceService) instance: InstanceService,
    @Inject(LOGGER) logger: Logger,
  ) {
    const consumer = `${instance.kind}-${instance.id}`;
    this.writers = KeySpace.of(redis).partitions.map(
      (k) => new TaskRecordWriter(k === 0 ? redis : redis.duplicate(), db, logger, consumer, k),
    );
  }

  onModuleInit(): void {
    this.writers.forEach((writer) => writer.start());
  }

  /** Before the pool closes: the batches in hand are written; the rest waits in Redis for another writer. */
  async beforeApplicationShutdown(): Promise<void> {
    await Promise.all(this.writers.map((writer) => writer.stop()));
  }
}
