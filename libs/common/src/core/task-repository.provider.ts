import type { Provider } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { PgService } from '../prisma/pg.service';
import { TASK_STREAM_TTL_S } from '../queues/queues';
import { TaskRepository } from '../tasks/task-repository';
import { InstanceService } from './instance.service';
import { REDIS } from './redis-connections';

/** How long an ended task's state stays readable in Redis, while its record is written behind. */
export const ENDED_TTL_MS = 10 * 60_000;

/**
 * The one TaskRepository of a process, on its command connection, with Postgres as the fallback for
 * endings of tasks whose state Redis lost; in a dispatcher, knowing which dispatcher it is (the held
 * set its requeues and endings touch).
 */
export const taskRepositoryProvider: Provider = {
  provide: TaskRepository,
  inject: [REDIS, PgService, InstanceService],
  useFactory: (redis: Redis, db: PgService, instance: InstanceService) =>
    new TaskRepository(
      redis,
      {
        endedTtlMs: ENDED_TTL_MS,
        streamTtlS: TASK_STREAM_TTL_S,
        dispatcherId: instance.kind === 'dispatcher' ? instance.id : undefined,
      },
      db,
    ),
};
