import { randomUUID } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import type { Redis } from 'ioredis';
import { APP_CONFIG, AppError, LOGGER, PrismaService, keys, requiredFeatures, taskAddress } from '@app/common';
import type { AppConfig, ChatParams, Logger } from '@app/common';
import type { AuthContext } from '../auth/auth-context';
import { ModelsService } from '../models/models.service';
import { REDIS } from '../redis/redis.module';
import { PresenceService } from './presence.service';
import { RelayedTask } from './relayed-task';
import { TaskQueueService } from './task-queue.service';
import { TaskStreamReader } from './task-stream.reader';

export interface RelayRequest {
  model: string;
  mode: 'auto' | 'direct' | 'network';
  params: ChatParams;
  includeUsage: boolean;
  api: 'openai' | 'ollama';
  stream: boolean;
}

/**
 * The api's half of the relay, shared by the OpenAI and Ollama routes: check the model, choose a
 * pool, write the task row, enqueue, then follow the task's event stream until it ends; and end it
 * when the client leaves or nobody takes it in time.
 */
@Injectable()
export class RelayService {
  constructor(
    private readonly prisma: PrismaService,
    private readonly models: ModelsService,
    private readonly presence: PresenceService,
    private readonly queue: TaskQueueService,
    private readonly reader: TaskStreamReader,
    @Inject(REDIS) private readonly redis: Redis,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  async start(caller: AuthContext, request: RelayRequest): Promise<RelayedTask> {
    const model = await this.models.get(caller.orgId, request.model);
    const params: ChatParams = {
      ...request.params,
      max_tokens:
        model.maxOutputTokens !== null
          ? Math.min(request.params.max_tokens, model.maxOutputTokens)
          : request.params.max_tokens,
    };
    const requires = requiredFeatures(params, request.includeUsage);
    const route = await this.presence.route(caller.orgId, model.id, request.mode, requires);
    const id = randomUUID();
    const address = taskAddress(route.mode, id);
    await this.prisma.client.task.create({
      data: {
        id,
        address,
        orgId: caller.orgId,
        apiKeyId: caller.apiKeyId,
        modelId: model.id,
        mode: route.mode,
        api: request.api,
        stream: request.stream,
      },
    });
    const task = new RelayedTask(id, address, route.mode, model.id, route.pool);
    const unsubscribe = this.reader.subscribe(id, (event) => this.onEvent(task, event));
    const timers = this.watch(task);
    const cleanup = () => {
      unsubscribe();
      timers.clear();
      void this.redis.del(keys.taskStream(id)).catch(() => undefined);
    };
    this.cleanups.set(task, cleanup);
    try {
      await this.queue.enqueue({
        v: 1,
        taskId: id,
        taskAddress: address,
        orgId: caller.orgId,
        model: model.id,
        pool: route.pool,
        params,
        requires,
        deadline: Date.now() + this.config.QUEUE_TIMEOUT_MS,
      });
    } catch (error) {
      cleanup();
      await this.end(id, 'failed', 'service_unavailable');
      this.logger.error({ err: error, task: address }, 'enqueue failed');
      throw new AppError('service_unavailable', 'The request could not be queued. Try again shortly.');
    }
    return task;
  }

  private readonly cleanups = new WeakMap<RelayedTask, () => void>();

  private onEvent(task: RelayedTask, event: import('@app/common').TaskEvent): void {
    if (event.type === 'assigned') {
      task.state = 'assigned';
    } else if (event.type === 'requeued') {
      task.state = 'queued';
    }
    task.push(event);
    this.touch.get(task)?.(event.type);
    if (task.ended) {
      this.cleanups.get(task)?.();
    }
  }

  private readonly touch = new WeakMap<RelayedTask, (type: string) => void>();

  /**
   * The api's own deadlines: QUEUE_TIMEOUT_MS waiting for a device (restarted when a device drops the
   * task before output), and TASK_IDLE_TIMEOUT_MS without any event once a device has it, which ends
   * a task whose dispatcher vanished without any other to recover it.
   */
  private watch(task: RelayedTask) {
    let queueTimer: NodeJS.Timeout | null = null;
    let idleTimer: NodeJS.Timeout | null = null;
    const armQueue = () => {
      queueTimer = setTimeout(() => void this.onQueueTimeout(task), this.config.QUEUE_TIMEOUT_MS);
    };
    const armIdle = () => {
      if (idleTimer) {
        clearTimeout(idleTimer);
      }
      idleTimer = setTimeout(() => void this.onIdleTimeout(task), this.config.TASK_IDLE_TIMEOUT_MS);
    };
    armQueue();
    this.touch.set(task, (type) => {
      if (type === 'assigned' && queueTimer) {
        clearTimeout(queueTimer);
        queueTimer = null;
      }
      if (type === 'requeued') {
        if (idleTimer) {
          clearTimeout(idleTimer);
          idleTimer = null;
        }
        if (!queueTimer) {
          armQueue();
        }
        return;
      }
      if (task.state === 'assigned') {
        armIdle();
      }
    });
    return {
      clear: () => {
        if (queueTimer) {
          clearTimeout(queueTimer);
        }
        if (idleTimer) {
          clearTimeout(idleTimer);
        }
      },
    };
  }

  private async onQueueTimeout(task: RelayedTask): Promise<void> {
    if (task.ended || task.state !== 'queued') {
      return;
    }
    if (await this.end(task.taskId, 'timed_out', 'queue_timeout', 'queued')) {
      await this.queue.remove(task.model, task.pool, task.taskId);
      this.onEvent(task, {
        type: 'error',
        code: 'queue_timeout',
        message: `No device took the request within ${this.config.QUEUE_TIMEOUT_MS} ms: every device serving '${task.model}' is busy. Try again later.`,
        status: 503,
      });
    }
  }

  private async onIdleTimeout(task: RelayedTask): Promise<void> {
    if (task.ended) {
      return;
    }
    if (await this.end(task.taskId, 'timed_out', 'device_timeout')) {
      await this.queue.cancelRunning(task.taskId);
      this.onEvent(task, {
        type: 'error',
        code: 'device_timeout',
        message: `The device sent nothing for ${this.config.TASK_IDLE_TIMEOUT_MS} ms.`,
        status: 504,
      });
    }
  }

  /**
   * Ties the task to the client's connection: when it closes before the answer is complete, the
   * task is abandoned. Returns false when the client left while the task was being created.
   */
  async follow(reply: FastifyReply, task: RelayedTask): Promise<boolean> {
    if (reply.raw.destroyed) {
      await this.abandon(task);
      return false;
    }
    reply.raw.on('close', () => {
      if (!reply.raw.writableFinished) {
        void this.abandon(task);
      }
    });
    return true;
  }

  /** The client went away: remove the job if it still waits, else tell the dispatcher to stop the device. */
  async abandon(task: RelayedTask): Promise<void> {
    if (task.ended || task.abandoned) {
      return;
    }
    task.abandoned = true;
    task.wake();
    this.cleanups.get(task)?.();
    if (await this.end(task.taskId, 'cancelled', 'client_disconnected', 'queued')) {
      await this.queue.remove(task.model, task.pool, task.taskId);
    } else {
      await this.queue.cancelRunning(task.taskId);
    }
  }

  /** Conditionally ends a task; returns whether this call ended it. */
  private async end(
    taskId: string,
    status: 'failed' | 'cancelled' | 'timed_out',
    errorCode: string,
    onlyFrom?: 'queued',
  ): Promise<boolean> {
    const { count } = await this.prisma.client.task.updateMany({
      where: { id: taskId, status: onlyFrom ? onlyFrom : { in: ['queued', 'assigned', 'streaming'] } },
      data: { status, errorCode, finishedAt: new Date() },
    });
    return count === 1;
  }
}
