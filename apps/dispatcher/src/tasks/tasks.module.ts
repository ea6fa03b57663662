import { Module } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { APP_CONFIG, PgService, TASK_STREAM_TTL_S, TaskRepository } from '@app/common';
import type { AppConfig } from '@app/common';
import { REDIS } from '../infra/redis.providers';
import { InstancesModule } from '../instances/instances.module';
import { QueuesModule } from '../queues/queues.module';
import { ReaperService } from './reaper.service';
import { RecordWriterHost } from './record-writer.host';
import { TakeoverService } from './takeover.service';

/** How long an ended task's state stays readable in Redis, while its record is written behind. */
export const ENDED_TTL_MS = 10 * 60_000;

/**
 * Tasks: the one repository of their transitions, the writer of their Postgres records, and the
 * safety nets: tasks of dead dispatchers taken over, tasks nobody can end any more reaped.
 */
@Module({
  imports: [InstancesModule, QueuesModule],
  providers: [
    {
      provide: TaskRepository,
      inject: [REDIS, APP_CONFIG, PgService],
      useFactory: (redis: Redis, c: AppConfig, db: PgService) =>
        new TaskRepository(
          redis,
          {
            liveTtlMs: c.QUEUE_TIMEOUT_MS + c.MAX_STREAM_MS + ENDED_TTL_MS,
            endedTtlMs: ENDED_TTL_MS,
            streamTtlS: TASK_STREAM_TTL_S,
          },
          db,
        ),
    },
    RecordWriterHost,
    ReaperService,
    TakeoverService,
  ],
  exports: [TaskRepository],
})
export class TasksModule {}
