import { randomUUID } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import type { OnApplicationShutdown } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import type { Redis } from 'ioredis';
import {
  APP_CONFIG,
  AppError,
  Coalescer,
  DISCONNECTED_MID_ANSWER,
  LOGGER,
  PrismaService,
  keys,
  requiredFeatures,
  taskAddress,
} from '@app/common';
import type { AppConfig, ChatParams, Logger, StreamEntry, TaskEvent } from '@app/common';
import type { AuthContext } from '../auth/auth-context';
import { LimitsService } from '../limits/limits.service';
import type { Slot } from '../limits/limits.service';
import { MetricsService } from '../metrics/metrics.service';
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
  requestId: string;
}

const RELAY_INTERRUPTED =
  'Part of the answer was lost between the device and this server (Redis was unavailable); the request was stopped. Retry it.';

/** Under load, the task rows of concurrent requests are inserted together at most this often. */
const INSERT_WINDOW_MS = 2;

interface TaskRow {
  id: string;
  address: string;
  orgId: string;
  apiKeyId: string;
  modelId: string;
  mode: 'direct' | 'network';
  api: 'openai' | 'ollama';
  stream: boolean;
}

/** How long the dispatcher has to end a cancelled task before the api ends it itself. */
const CANCEL_FALLBACK_MS = 5_000;

/** What the api holds for a task while it is in flight: timers, limit slots, timings for metrics. */
interface Flight {
  task: RelayedTask;
  api: 'openai' | 'ollama';
  startedAt: number;
  enqueuedAt: number;
  firstOutputAt: number | null;
  queueTimer: NodeJS.Timeout | null;
  idleTimer: NodeJS.Timeout | null;
  streamTimer: NodeJS.Timeout;
  unsubscribe: () => void;
  concurrency: Slot;
  queued: Slot;
  done: boolean;
  /** The assignment whose events are expected, and the sequence number of the next one. */
  attempt: number;
  nextSeq: number;
  /** The api is ending the task itself (a timeout, lost events). */
  failing: boolean;
}

/**
 * The api's half of the relay, shared by the OpenAI and Ollama routes: limits, model check, pool
 * choice, the task row, the job; then the task's event stream until it ends. It also ends tasks
 * itself: when the client leaves, when nobody takes them in time, when a device falls silent, when
 * they outlive MAX_STREAM_MS, and when the api shuts down.
 */
@Injectable()
export class RelayService implements OnApplicationShutdown {
  private readonly flights = new Map<RelayedTask, Flight>();
  /** Fallbacks that end abandoned tasks no dispatcher answered for (see abandon). */
  private readonly fallbacks = new Set<NodeJS.Timeout>();
  /** The task rows of concurrent requests, inserted together (see Coalescer). */
  private readonly inserts = new Coalescer((rows: TaskRow[]) => this.insertBatch(rows), INSERT_WINDOW_MS);
  private draining = false;

  constructor(
    private readonly prisma: PrismaService,
    private readonly models: ModelsService,
    private readonly presence: PresenceService,
    private readonly queue: TaskQueueService,
    private readonly reader: TaskStreamReader,
    private readonly limits: LimitsService,
    private readonly metrics: MetricsService,
    @Inject(REDIS) private readonly redis: Redis,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  /**
   * One statement for the rows of a window, in plain SQL on the pool (this is on every request's
   * path; see PrismaService). Should it fail, each row is tried alone, so that one bad row (its
   * model deleted meanwhile, say) fails only its own request.
   */
  private async insertBatch(rows: TaskRow[]): Promise<(void | Error)[]> {
    const columns = `INSERT INTO tasks (id, address, org_id, api_key_id, model_id, mode, api, stream)`;
    const values = (list: TaskRow[]) => [
      list.map((r) => r.id),
      list.map((r) => r.address),
      list.map((r) => r.orgId),
      list.map((r) => r.apiKeyId),
      list.map((r) => r.modelId),
      list.map((r) => r.mode),
      list.map((r) => r.api),
      list.map((r) => r.stream),
    ];
    const sql = `${columns} SELECT * FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::uuid[], $5::text[],
      $6::task_mode[], $7::task_api[], $8::boolean[])`;
    try {
      await this.prisma.sql(sql, values(rows));
      return rows.map(() => undefined);
    } catch (error) {
      if (rows.length === 1) {
        throw error;
      }
      return Promise.all(
        rows.map((row) =>
          this.prisma.sql(sql, values([row])).then(
            () => undefined,
            (err: unknown) => (err instanceof Error ? err : new Error(String(err))),
          ),
        ),
      );
    }
  }

  /** Request caps that do not depend on the model. */
  private checkCaps(params: ChatParams): void {
    if (params.messages.length > this.config.MAX_MESSAGES) {
      throw new AppError(
        'invalid_request',
        `Too many messages: at most ${this.config.MAX_MESSAGES} per request.`,
        'messages',
      );
    }
    const chars = params.messages.reduce((n, m) => n + (m.content?.length ?? 0), 0);
    if (chars > this.config.MAX_INPUT_CHARS) {
      throw new AppError(
        'invalid_request',
        `The messages are too long: at most ${this.config.MAX_INPUT_CHARS} characters in all.`,
        'messages',
      );
    }
  }

  /**
   * Starts a task, or throws the error the client gets. The org's rate-limit headers are set on the
   * reply as soon as they are known, so that they also come with a later error.
   */
  async start(caller: AuthContext, request: RelayRequest, reply: FastifyReply): Promise<RelayedTask> {
    if (this.draining) {
      throw new AppError('server_shutdown', 'This server is shutting down. Retry the request.');
    }
    this.checkCaps(request.params);
    const model = await this.models.forChat(caller.orgId, request.model);
    const params: ChatParams = {
      ...request.params,
      max_tokens:
        model.maxOutputTokens !== null
          ? Math.min(request.params.max_tokens, model.maxOutputTokens)
          : request.params.max_tokens,
    };
    const requires = requiredFeatures(params, request.includeUsage);
    const route = await this.presence.route(caller.orgId, model.id, request.mode, requires);
    void reply.headers(await this.limits.takeRequest(caller.orgId, caller.limits));
    const id = randomUUID();
    const concurrency = await this.limits.takeConcurrency(caller.orgId, caller.limits, id);
    let queued: Slot;
    try {
      queued = await this.limits.takeQueued(caller.orgId, caller.limits, model.id, id);
    } catch (error) {
      concurrency.release();
      throw error;
    }
    const address = taskAddress(route.mode, id);
    try {
      await this.inserts.submit({
        id,
        address,
        orgId: caller.orgId,
        apiKeyId: caller.apiKeyId,
        modelId: model.id,
        mode: route.mode,
        api: request.api,
        stream: request.stream,
      });
    } catch (error) {
      concurrency.release();
      queued.release();
      throw error;
    }
    const task = new RelayedTask(id, address, route.mode, model.id, route.pool);
    const now = performance.now();
    const flight: Flight = {
      task,
      api: request.api,
      startedAt: now,
      enqueuedAt: now,
      firstOutputAt: null,
      queueTimer: null,
      idleTimer: null,
      streamTimer: setTimeout(() => void this.onStreamTimeout(flight), this.config.MAX_STREAM_MS),
      unsubscribe: this.reader.subscribe(id, (entry) => this.onEntry(flight, entry)),
      concurrency,
      queued,
      done: false,
      attempt: 0,
      nextSeq: 0,
      failing: false,
    };
    this.flights.set(task, flight);
    this.armQueueTimer(flight);
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
        requestId: request.requestId,
        deadline: Date.now() + this.config.QUEUE_TIMEOUT_MS,
      });
    } catch (error) {
      this.finish(flight, 'service_unavailable');
      await this.end(id, 'failed', 'service_unavailable');
      this.logger.error({ err: error, task: address, requestId: request.requestId }, 'enqueue failed');
      throw new AppError('service_unavailable', 'The request could not be queued. Try again shortly.');
    }
    return task;
  }

  /**
   * An entry of the task's stream. Entries of an earlier assignment and events already seen are
   * dropped (a write retried after a Redis failure); a gap means events were lost with Redis, and
   * the client gets an explicit error instead of an answer with a hole in it.
   */
  private onEntry(flight: Flight, entry: StreamEntry): void {
    if (flight.done) {
      return;
    }
    let events = entry.events;
    if (entry.attempt !== null) {
      if (entry.attempt < flight.attempt) {
        return;
      }
      if (entry.attempt > flight.attempt) {
        if (flight.firstOutputAt !== null) {
          // Output of the earlier attempt reached the client: another device cannot continue it.
          void this.failFlight(flight, 'failed', 'device_disconnected', 502, DISCONNECTED_MID_ANSWER);
          return;
        }
        flight.attempt = entry.attempt;
        flight.nextSeq = 0;
      }
      if (entry.seq > flight.nextSeq) {
        this.logger.error(
          { task: flight.task.address, attempt: entry.attempt, seq: entry.seq, expected: flight.nextSeq },
          'events of the task were lost on the way (Redis): ending it',
        );
        void this.failFlight(flight, 'failed', 'relay_interrupted', 502, RELAY_INTERRUPTED);
        return;
      }
      events = events.slice(flight.nextSeq - entry.seq);
      flight.nextSeq += events.length;
    }
    for (const event of events) {
      this.onEvent(flight, event);
    }
  }

  private onEvent(flight: Flight, event: TaskEvent): void {
    const { task } = flight;
    const now = performance.now();
    switch (event.type) {
      case 'assigned':
        if (task.state === 'queued') {
          this.metrics.queueWait.observe({ model: task.model }, (now - flight.enqueuedAt) / 1000);
        }
        task.state = 'assigned';
        flight.queued.release();
        this.clearQueueTimer(flight);
        this.armIdleTimer(flight);
        break;
      case 'requeued':
        task.state = 'queued';
        flight.enqueuedAt = now;
        this.clearIdleTimer(flight);
        this.armQueueTimer(flight);
        break;
      case 'delta':
        if (flight.firstOutputAt === null) {
          flight.firstOutputAt = now;
          this.metrics.timeToFirstToken.observe(
            { model: task.model, api: flight.api },
            (now - flight.startedAt) / 1000,
          );
        }
        this.armIdleTimer(flight);
        break;
      case 'done': {
        const tokens = event.usage?.completion_tokens;
        const seconds = flight.firstOutputAt === null ? 0 : (now - flight.firstOutputAt) / 1000;
        if (tokens && seconds > 0) {
          this.metrics.tokensPerSecond.observe({ model: task.model }, tokens / seconds);
        }
        break;
      }
      case 'error':
        break;
    }
    task.push(event);
    if (event.type === 'done') {
      this.finish(flight, 'completed');
    } else if (event.type === 'error') {
      this.finish(flight, event.code);
    }
  }

  /** Releases everything a task holds, once. */
  private finish(flight: Flight, outcome: string): void {
    if (flight.done) {
      return;
    }
    flight.done = true;
    this.metrics.tasks.inc({ outcome, api: flight.api });
    flight.unsubscribe();
    this.clearQueueTimer(flight);
    this.clearIdleTimer(flight);
    clearTimeout(flight.streamTimer);
    flight.concurrency.release();
    flight.queued.release();
    this.flights.delete(flight.task);
    void this.redis.del(keys.taskStream(flight.task.taskId)).catch(() => undefined);
  }

  private armQueueTimer(flight: Flight): void {
    this.clearQueueTimer(flight);
    flight.queueTimer = setTimeout(() => void this.onQueueTimeout(flight), this.config.QUEUE_TIMEOUT_MS);
  }

  private clearQueueTimer(flight: Flight): void {
    if (flight.queueTimer) {
      clearTimeout(flight.queueTimer);
      flight.queueTimer = null;
    }
  }

  /** Once a device has the task, any event resets the silence deadline (TASK_IDLE_TIMEOUT_MS). */
  private armIdleTimer(flight: Flight): void {
    this.clearIdleTimer(flight);
    flight.idleTimer = setTimeout(() => void this.onIdleTimeout(flight), this.config.TASK_IDLE_TIMEOUT_MS);
  }

  private clearIdleTimer(flight: Flight): void {
    if (flight.idleTimer) {
      clearTimeout(flight.idleTimer);
      flight.idleTimer = null;
    }
  }

  /**
   * Ends the task with an error the api decided and tells the client. With `onlyFrom: 'queued'`
   * nothing happens unless the task still waits. Otherwise a task whose row is already terminal
   * (it ended, but its last events never arrived) still ends here: the client gets an explicit
   * `relay_interrupted` error instead of waiting forever. Never rejects: what cannot be recorded now
   * is logged and left to the orphan check.
   */
  private async failFlight(
    flight: Flight,
    status: 'failed' | 'cancelled' | 'timed_out',
    code: string,
    httpStatus: number,
    message: string,
    onlyFrom?: 'queued',
  ): Promise<void> {
    if (flight.done || flight.failing) {
      return;
    }
    flight.failing = true;
    // Should Postgres be unreachable, the client still gets its error; the row is ended later by
    // the dispatchers' orphan check.
    const ended = await this.end(flight.task.taskId, status, code, onlyFrom).catch((err: unknown) => {
      this.logger.error({ err, task: flight.task.address, code }, 'could not record the end of a task');
      return true;
    });
    if (!ended && onlyFrom === 'queued') {
      flight.failing = false;
      return;
    }
    if (flight.done) {
      // Its ending arrived meanwhile.
      return;
    }
    try {
      if (ended && onlyFrom === 'queued') {
        await this.queue.remove(flight.task.model, flight.task.pool, flight.task.taskId);
      } else {
        await this.queue.cancelRunning(flight.task.taskId);
      }
    } catch (err) {
      // Redis is unreachable: the job expires with its deadline, the device's task with its lock.
      this.logger.warn({ err: (err as Error).message, task: flight.task.address }, 'could not withdraw the job');
    }
    if (ended) {
      this.onEvent(flight, { type: 'error', code, message, status: httpStatus });
    } else {
      this.logger.error({ task: flight.task.address, code }, 'the task ended but its last events never arrived');
      this.onEvent(flight, { type: 'error', code: 'relay_interrupted', message: RELAY_INTERRUPTED, status: 502 });
    }
  }

  private async onQueueTimeout(flight: Flight): Promise<void> {
    if (flight.task.state !== 'queued') {
      return;
    }
    await this.failFlight(
      flight,
      'timed_out',
      'queue_timeout',
      503,
      `No device took the request within ${this.config.QUEUE_TIMEOUT_MS} ms: every device serving '${flight.task.model}' is busy. Try again later.`,
      'queued',
    );
  }

  private async onIdleTimeout(flight: Flight): Promise<void> {
    await this.failFlight(
      flight,
      'timed_out',
      'device_timeout',
      504,
      `The device sent nothing for ${this.config.TASK_IDLE_TIMEOUT_MS} ms.`,
    );
  }

  private async onStreamTimeout(flight: Flight): Promise<void> {
    await this.failFlight(
      flight,
      'timed_out',
      'stream_timeout',
      504,
      `The request did not finish within ${this.config.MAX_STREAM_MS} ms.`,
    );
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
    const flight = this.flights.get(task);
    if (!flight || task.ended || task.abandoned) {
      return;
    }
    task.abandoned = true;
    task.wake();
    this.finish(flight, 'cancelled');
    try {
      if (await this.end(task.taskId, 'cancelled', 'client_disconnected', 'queued')) {
        await this.queue.remove(task.model, task.pool, task.taskId);
        return;
      }
      // A device has it: the dispatcher stops the device and ends the task with the hash of what
      // was sent.
      await this.queue.cancelRunning(task.taskId);
    } catch (err) {
      // Postgres or Redis is unreachable: the fallback below or the orphan check ends the task.
      this.logger.warn({ err: (err as Error).message, task: task.address }, 'could not withdraw an abandoned task');
    }
    // Should no dispatcher answer (it died), the api ends the task after a grace period.
    const fallback = setTimeout(() => {
      this.fallbacks.delete(fallback);
      this.end(task.taskId, 'cancelled', 'client_disconnected').catch((err: unknown) =>
        this.logger.warn({ err: (err as Error).message, task: task.address }, 'could not end an abandoned task'),
      );
    }, CANCEL_FALLBACK_MS);
    fallback.unref();
    this.fallbacks.add(fallback);
  }

  /**
   * Shutdown: refuse new requests, give the ones in flight SHUTDOWN_GRACE_MS to finish, then end
   * the rest with an explicit error (their clients get it; their devices are told to stop).
   */
  async drain(): Promise<void> {
    this.draining = true;
    const deadline = Date.now() + this.config.SHUTDOWN_GRACE_MS;
    while (this.flights.size > 0 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
    }
    await Promise.all(
      [...this.flights.values()].map((flight) =>
        this.failFlight(
          flight,
          'failed',
          'server_shutdown',
          503,
          'The server shut down before the answer was complete.',
        ),
      ),
    );
  }

  /** The process is going: no timer of a task may fire on closed connections. */
  onApplicationShutdown(): void {
    for (const flight of this.flights.values()) {
      this.clearQueueTimer(flight);
      this.clearIdleTimer(flight);
      clearTimeout(flight.streamTimer);
      flight.unsubscribe();
    }
    this.flights.clear();
    this.fallbacks.forEach(clearTimeout);
    this.fallbacks.clear();
  }

  get inFlight(): number {
    return this.flights.size;
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
