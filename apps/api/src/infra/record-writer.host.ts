import { Inject, Injectable } from '@nestjs/common';
import type { BeforeApplicationShutdown, OnModuleInit } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { LOGGER, PrismaService, TaskRecordWriter } from '@app/common';
import type { Logger } from '@app/common';
import { InstanceService } from './instance.service';
import { RECORDS_REDIS } from './redis.module';

/** Runs this api's writer of task records (every api and dispatcher runs one, see TaskRecordWriter). */
@Injectable()
export class RecordWriterHost implements OnModuleInit, BeforeApplicationShutdown {
  private readonly writer: TaskRecordWriter;

  constructor(
    @Inject(RECORDS_REDIS) redis: Redis,
    db: PrismaService,
    instance: InstanceService,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.writer = new TaskRecordWriter(redis, db, logger, `api-${instance.id}`);
  }

  onModuleInit(): void {
    this.writer.start();
  }

  /** Before the pool closes: the batch in hand is written; the rest waits in Redis for another writer. */
  async beforeApplicationShutdown(): Promise<void> {
    await this.writer.stop();
  }
}
