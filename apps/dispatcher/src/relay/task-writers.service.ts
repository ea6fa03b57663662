import { Inject, Injectable } from '@nestjs/common';
import { APP_CONFIG, LOGGER, TASK_STREAM_TTL_S, TaskRepository, REDIS, KeySpace } from '@app/common';
import type { AppConfig, Logger, RedisClient } from '@app/common';
import { TaskWriter } from './task-writer';
import type { WriterHooks } from './task-writer';

/** Makes the writer of each assignment, and knows which are still writing (shutdown waits for them). */
@Injectable()
export class TaskWriters {
  private readonly busy = new Set<Promise<unknown>>();

  private readonly keys: KeySpace;

  constructor(
    @Inject(REDIS) private readonly redis: RedisClient,
    private readonly tasks: TaskRepository,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {
    this.keys = KeySpace.of(redis);
  }

  /** `streamed` false: the client gets the answer whole, and output may wait for the ending. */
  writer(taskId: string, attempt: number, streamed: boolean, hooks: Omit<WriterHooks, 'onEndFailed'>): TaskWriter {
    // Past TASK_IDLE_TIMEOUT_MS the api has given up on a silent task anyway (and told its client).
    return new TaskWriter(
      this.redis,
      this.tasks,
      taskId,
      this.keys.taskStream(taskId),
      TASK_STREAM_TTL_S,
      attempt,
      this.config.TASK_IDLE_TIMEOUT_MS,
      {
        ...hooks,
        onEndFailed: (err) =>
          this.logger.warn(
            { err: (err as Error).message, task: taskId },
            'the ending of a task whose events were lost could not be recorded; the reaper ends it at its deadline',
          ),
      },
      !streamed,
    );
  }

  /** Remembers a closing in progress until it settles. */
  track<T>(closing: Promise<T>): Promise<T> {
    this.busy.add(closing);
    const forget = () => void this.busy.delete(closing);
    closing.then(forget, forget);
    return closing;
  }

  /** Waits (at most `ms`) for every closing to be written: shutdown must not drop the last events. */
  async flush(ms: number): Promise<void> {
    await Promise.race([Promise.allSettled([...this.busy]), new Promise((r) => setTimeout(r, ms).unref())]);
  }
}
