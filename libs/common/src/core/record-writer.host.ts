import { Inject, Injectable } from '@nestjs/common';
import type { BeforeApplicationShutdown, OnModuleInit } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { LOGGER } from '../logging/logger';
import type { Logger } from '../logging/logger';
import { PgService } from '../prisma/pg.service';
import { TaskRecordWriter } from '../tasks/task-record-writer';
import { InstanceService } from './instance.service';
import { RECORDS_REDIS } from './redis-connections';

/**
 * Runs this process's writer of task records, consumer `<kind>-<instance id>` (every api and
 * dispatcher runs one, see TaskRecordWriter).
 */
@Injectable()
export class RecordWriterHost implements OnModuleInit, BeforeApplicationShutdown {
  private readonly writer: TaskRecordWriter;

  constructor(
    @Inject(RECORDS_REDIS) redis: Redis,
    @Inject(PgService) db: PgService,
    @Inject(InstanceService) instance: InstanceService,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.writer = new TaskRecordWriter(redis, db, logger, `${instance.kind}-${instance.id}`);
  }

  onModuleInit(): void {
    this.writer.start();
  }

  /** Before the pool closes: the batch in hand is written; the rest waits in Redis for another writer. */
  async beforeApplicationShutdown(): Promise<void> {
    await this.writer.stop();
  }
}
