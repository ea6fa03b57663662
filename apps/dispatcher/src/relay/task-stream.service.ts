import { Inject, Injectable } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { TASK_STREAM_TTL_S, keys } from '@app/common';
import type { TaskEvent } from '@app/common';
import { REDIS } from '../redis.providers';

/**
 * Writes a task's events to its Redis Stream, which the api instance holding the client reads.
 * A stream (unlike Pub/Sub) keeps every event in order until it is read, and expires on its own.
 */
@Injectable()
export class TaskStreamService {
  constructor(@Inject(REDIS) private readonly redis: Redis) {}

  async append(taskId: string, event: TaskEvent): Promise<void> {
    const key = keys.taskStream(taskId);
    // One round trip: append and (re)set the expiry so an abandoned stream cannot outlive its task.
    await this.redis.multi().xadd(key, '*', 'e', JSON.stringify(event)).expire(key, TASK_STREAM_TTL_S).exec();
  }
}
