import type { ChainableCommander, Redis } from 'ioredis';
import type { TaskApi, TaskMode, TaskStatus } from '../prisma/generated/enums';
import { keys } from '../redis/keys';
import { ENDED_VERSION, TASK_TRANSITIONS_LUA } from './task-transitions.lua';
import type { SqlRunner } from './task-record-writer';

/** What a new task starts with (its job is enqueued right after). */
export interface NewTask {
  id: string;
  address: string;
  orgId: string;
  apiKeyId: string | null;
  modelId: string;
  mode: TaskMode;
  api: TaskApi;
  stream: boolean;
  /** The queue line its job waits in. */
  line: string;
  /** The api instance holding the client. */
  apiInstance: string;
  /** Past this (epoch ms) nobody can still end the task: the reaper does. */
  deadline: number;
}

/** How a task ended. */
export interface Ending {
  status: Extract<TaskStatus, 'completed' | 'failed' | 'cancelled' | 'timed_out'>;
  errorCode?: string | null;
  finishReason?: string | null;
  promptTokens?: number | null;
  completionTokens?: number | null;
  outputSha256?: string | null;
  /** UTF-8 bytes of output relayed to the client. */
  outputBytes?: number | null;
  /** Who counted the tokens: the device (its report), or the relay (what it relayed, for an early end). */
  usageSource?: 'device' | 'relay' | null;
  /** When the first output was relayed (epoch ms), if no earlier transition recorded it. */
  firstTokenAt?: number | null;
}

/**
 * Which state an ending may start from: any that is not terminal, only `queued` (a request that
 * waited too long or whose client left before a device took it), or only the given attempt (a
 * dispatcher ends only the assignment it holds).
 */
export type EndGuard = 'any' | 'queued' | { attempt: number };

/** A task's state as Redis holds it while the task is in flight (and a while after). */
export interface TaskSnapshot {
  id: string;
  address: string;
  orgId: string;
  apiKeyId: string | null;
  modelId: string;
  mode: TaskMode;
  api: TaskApi;
  stream: boolean;
  line: string;
  apiInstance: string;
  status: TaskStatus;
  version: number;
  attempts: number;
  deviceId: string | null;
  dispatcherId: string | null;
  /** The BullMQ lock token of the current assignment. */
  token: string | null;
  finishReason: string | null;
  errorCode: string | null;
  promptTokens: number | null;
  completionTokens: number | null;
  outputSha256: string | null;
  outputBytes: number | null;
  usageSource: 'device' | 'relay' | null;
  queuedAt: Date;
  assignedAt: Date | null;
  firstTokenAt: Date | null;
  finishedAt: Date | null;
}

/**
 * `recovered`: the task's state was gone from Redis (lost with a restart without persistence), and
 * the ending was written to its Postgres record directly.
 */
export type TransitionResult =
  { ok: true; attempt: number; recovered?: boolean } | { ok: false; status: TaskStatus | null };

/** An event for the task's stream, as XADD field/value pairs (see encodeStreamEntry). */
export type StreamFields = string[];

export interface TaskRepositoryOptions {
  /** How long a live task's state is kept at most (its deadline plus a margin). */
  liveTtlMs: number;
  /** How long an ended task's state stays readable (while its record is written). */
  endedTtlMs: number;
  /** How long a task's event stream lives after its last event. */
  streamTtlS: number;
}

const num = (v: string | undefined) => (v === undefined || v === '' ? null : Number(v));
const date = (v: string | undefined) => (v === undefined || v === '' ? null : new Date(Number(v)));

/** Parses the hash of a task's state (field names as the transitions script writes them). */
export function parseSnapshot(h: Record<string, string>): TaskSnapshot | null {
  if (!h.id || !h.st) {
    return null;
  }
  return {
    id: h.id,
    address: h.addr,
    orgId: h.org,
    apiKeyId: h.key || null,
    modelId: h.model,
    mode: h.mode as TaskMode,
    api: h.api as TaskApi,
    stream: h.stream === '1',
    line: h.line,
    apiInstance: h.apiid,
    status: h.st as TaskStatus,
    version: Number(h.ver),
    attempts: Number(h.att),
    deviceId: h.dev || null,
    dispatcherId: h.disp || null,
    token: h.tok || null,
    finishReason: h.fr || null,
    errorCode: h.err || null,
    promptTokens: num(h.pt),
    completionTokens: num(h.ct),
    outputSha256: h.sha || null,
    outputBytes: num(h.ob),
    usageSource: (h.us as 'device' | 'relay' | undefined) || null,
    queuedAt: new Date(Number(h.q)),
    assignedAt: date(h.as),
    firstTokenAt: date(h.ft),
    finishedAt: date(h.fin),
  };
}

type TransitionOp = 'create' | 'claim' | 'first' | 'requeue' | 'end';

interface TransitionCommand {
  syTask(
    state: string,
    records: string,
    live: string,
    stream: string,
    op: TransitionOp,
    now: number,
    guard: string,
    ttlMs: number,
    streamTtlS: number,
    pairs: number,
    ...rest: (string | number)[]
  ): Promise<[number, number | string]>;
}

/**
 * The one owner of a task's transitions: create, claim, first output, requeue and every ending. The
 * api and the dispatchers call it; nothing else changes a task. Each call is one Redis round trip
 * (see TASK_TRANSITIONS_LUA); the Postgres record follows from the records stream.
 */
export class TaskRepository {
  private readonly redis: Redis & TransitionCommand;

  constructor(
    redis: Redis,
    private readonly options: TaskRepositoryOptions,
    /** Postgres, for endings of tasks whose state Redis lost. */
    private readonly records?: SqlRunner,
  ) {
    redis.defineCommand('syTask', { numberOfKeys: 4, lua: TASK_TRANSITIONS_LUA });
    this.redis = redis as Redis & TransitionCommand;
  }

  private async run(
    taskId: string,
    op: TransitionOp,
    guard: string,
    pairs: (string | number)[],
    event: StreamFields = [],
    ttlMs = this.options.endedTtlMs,
  ): Promise<TransitionResult> {
    const [ok, value] = await this.redis.syTask(
      keys.taskState(taskId),
      keys.records,
      keys.liveTasks,
      keys.taskStream(taskId),
      op,
      Date.now(),
      guard,
      ttlMs,
      this.options.streamTtlS,
      pairs.length / 2,
      ...pairs,
      ...event,
    );
    return ok === 1 ? { ok: true, attempt: Number(value) } : { ok: false, status: (value as TaskStatus) || null };
  }

  /**
   * Adds the creation of a task (as queued) to a pipeline, so that it goes to Redis with the task's job
   * in one round trip. Its reply is [1, 0], or [0, status] if a task with this id exists.
   */
  createIn(pipeline: ChainableCommander, task: NewTask): void {
    const ttl = task.deadline - Date.now() + this.options.endedTtlMs;
    // Queued on the pipeline (its reply comes with exec), not a promise of its own.
    void (pipeline as unknown as TransitionCommand).syTask(
      keys.taskState(task.id),
      keys.records,
      keys.liveTasks,
      keys.taskStream(task.id),
      'create',
      Date.now(),
      '',
      ttl,
      this.options.streamTtlS,
      ...this.creation(task),
    );
  }

  /** The field/value pairs of a new task, preceded by their count. */
  private creation(task: NewTask): [number, ...(string | number)[]] {
    const pairs = [
      'id',
      task.id,
      'addr',
      task.address,
      'org',
      task.orgId,
      'key',
      task.apiKeyId ?? '',
      'model',
      task.modelId,
      'mode',
      task.mode,
      'api',
      task.api,
      'stream',
      task.stream ? '1' : '0',
      'line',
      task.line,
      'apiid',
      task.apiInstance,
      'dl',
      task.deadline,
    ];
    return [pairs.length / 2, ...pairs];
  }

  /**
   * A device of a dispatcher takes a queued task: the next attempt. The `assigned` event (sequence 0
   * of the attempt) is written to the task's stream only if the claim is accepted.
   */
  claim(taskId: string, by: { deviceId: string; dispatcherId: string; token: string }): Promise<TransitionResult> {
    const pairs = ['dev', by.deviceId, 'disp', by.dispatcherId, 'tok', by.token];
    return this.run(taskId, 'claim', '', pairs);
  }

  /** The first output of an attempt: written with the entry that carries it. */
  firstOutput(taskId: string, attempt: number, entry: StreamFields): Promise<TransitionResult> {
    return this.run(taskId, 'first', String(attempt), [], entry);
  }

  /** The attempt's device is gone before any output: the task waits for another. */
  requeue(taskId: string, attempt: number, event: StreamFields): Promise<TransitionResult> {
    return this.run(taskId, 'requeue', String(attempt), [], event);
  }

  /** Ends the task if `guard` allows it; `event` reaches the client only then. */
  async end(taskId: string, ending: Ending, guard: EndGuard, event: StreamFields = []): Promise<TransitionResult> {
    const pairs: (string | number)[] = ['st', ending.status];
    const optional: [string, string | number | null | undefined][] = [
      ['err', ending.errorCode],
      ['fr', ending.finishReason],
      ['pt', ending.promptTokens],
      ['ct', ending.completionTokens],
      ['sha', ending.outputSha256],
      ['ob', ending.outputBytes],
      ['us', ending.usageSource],
      ['ft', ending.firstTokenAt],
    ];
    for (const [field, value] of optional) {
      if (value !== null && value !== undefined) {
        pairs.push(field, value);
      }
    }
    const g = guard === 'any' ? '' : guard === 'queued' ? 'queued' : `attempt:${guard.attempt}`;
    let result: TransitionResult;
    try {
      result = await this.run(taskId, 'end', g, pairs, event);
    } catch (err) {
      // Redis is unreachable: the ending cannot wait for it (the client is told now), so it goes to
      // the record itself; the state in Redis, if it survives, can no longer replace it.
      if (!this.records) {
        throw err;
      }
      return this.endRecord(taskId, ending, guard);
    }
    if (result.ok || result.status !== null || !this.records) {
      return result;
    }
    return this.endRecord(taskId, ending, guard);
  }

  /**
   * The task's state is not in Redis (Redis lost it in a restart without persistence, or the task never
   * existed), or Redis is unreachable. Its record, if Postgres has it and it has not ended, ends there, as the transition would
   * have done; nothing written behind can replace that ending (it carries the final version).
   */
  private async endRecord(taskId: string, ending: Ending, guard: EndGuard): Promise<TransitionResult> {
    const from = guard === 'queued' ? ['queued'] : ['queued', 'assigned', 'streaming'];
    const { rowCount } = await this.records!.sql(
      `UPDATE tasks SET status = $2, error_code = COALESCE($3, error_code), finish_reason = COALESCE($4, finish_reason),
         prompt_tokens = COALESCE($5, prompt_tokens), completion_tokens = COALESCE($6, completion_tokens),
         output_sha256 = COALESCE($7, output_sha256), finished_at = now(), record_version = $8,
         output_bytes = COALESCE($10, output_bytes), usage_source = COALESCE($11, usage_source)
       WHERE id = $1 AND status = ANY($9::task_status[])`,
      [
        taskId,
        ending.status,
        ending.errorCode ?? null,
        ending.finishReason ?? null,
        ending.promptTokens ?? null,
        ending.completionTokens ?? null,
        ending.outputSha256 ?? null,
        ENDED_VERSION,
        from,
        ending.outputBytes ?? null,
        ending.usageSource ?? null,
      ],
    );
    return rowCount === 1 ? { ok: true, attempt: 0, recovered: true } : { ok: false, status: null };
  }

  async get(taskId: string): Promise<TaskSnapshot | null> {
    return parseSnapshot(await this.redis.hgetall(keys.taskState(taskId)));
  }

  /** The tasks a dispatcher holds. */
  heldBy(dispatcherId: string): Promise<string[]> {
    return this.redis.smembers(keys.heldBy(dispatcherId));
  }

  /** Tasks past their deadline that nobody ended (their api died with them). */
  overdue(now: number, limit: number): Promise<string[]> {
    return this.redis.zrangebyscore(keys.liveTasks, '-inf', now, 'LIMIT', 0, limit);
  }
}
