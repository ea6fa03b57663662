import { setTimeout as delay } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import type { TaskStatus } from '../prisma/generated/enums';
import { keys } from '../redis/keys';
import type { SqlRunner } from './task-record-writer';
import type { EndGuard, Ending, NewTask, StreamFields, TaskSnapshot, TransitionResult } from './task-state';
import { parseSnapshot } from './task-state';
import { LIVE_STATUSES, sqlStatusList } from './task-statuses';
import type { LiveStatus } from './task-statuses';
import { claimPairs, creationArgs, endRecordStatement, endingPairs, guardArg } from './task-transition-args';
import { TASK_TRANSITIONS_LUA } from './task-transitions.lua';

/**
 * An ending written to Postgres directly may find no row yet: its records were read by a writer that
 * writes them within LINGER_MS and a statement (TaskRecordWriter), even when Redis is gone meanwhile.
 * It is tried again after these waits (about 2 s in all) before the task is taken for unknown.
 */
const ROW_WAITS_MS = [300, 700, 1_000];

export interface TaskRepositoryOptions {
  /** How long an ended task's state stays readable (while its record is written). */
  endedTtlMs: number;
  /** How long a task's event stream lives after its last event. */
  streamTtlS: number;
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
 * (see TASK_TRANSITIONS_LUA); the Postgres record follows from the records stream. It owns the task
 * indexes too (the live set, the dispatchers' held sets): the reaper and the takeover sweep them
 * through it (overdue, release), never behind the script's back.
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
   * Creates a task (as queued). The command is issued at once, before the returned promise is awaited,
   * so that commands issued after it in the same turn on the same connection follow it (the api sends
   * the task's job with it). Refused when a task with this id exists.
   */
  create(task: NewTask): Promise<TransitionResult> {
    // run issues the script before its first await.
    const [, ...pairs] = creationArgs(task);
    return this.run(task.id, 'create', '', pairs, [], task.deadline - Date.now() + this.options.endedTtlMs);
  }

  /**
   * A device of a dispatcher takes a queued task: the next attempt. The `assigned` event (sequence 0
   * of the attempt) is written to the task's stream only if the claim is accepted.
   */
  claim(taskId: string, by: { deviceId: string; dispatcherId: string; token: string }): Promise<TransitionResult> {
    return this.run(taskId, 'claim', '', claimPairs(by));
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
    const pairs = endingPairs(ending);
    const g = guardArg(guard);
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
    const { text, values } = endRecordStatement(taskId, ending, guard);
    for (const wait of [0, ...ROW_WAITS_MS]) {
      if (wait > 0) {
        await delay(wait);
      }
      if ((await this.records!.sql(text, values)).rowCount === 1) {
        return { ok: true, attempt: 0, recovered: true };
      }
      if ((await this.records!.sql('SELECT 1 FROM tasks WHERE id = $1', [taskId])).rowCount === 1) {
        break; // It has ended already, or the guard refuses: as the transition would have.
      }
    }
    return { ok: false, status: null };
  }

  async get(taskId: string): Promise<TaskSnapshot | null> {
    return parseSnapshot(await this.redis.hgetall(keys.taskState(taskId)));
  }

  /** The tasks a dispatcher holds (its held set, kept by the transitions). */
  heldBy(dispatcherId: string): Promise<string[]> {
    return this.redis.smembers(keys.heldBy(dispatcherId));
  }

  /**
   * A dead dispatcher's hold on a task is over: a survivor rescued the task (its requeue or ending
   * left the set already) or found nothing to rescue (the task ended, moved on, or its state is gone).
   */
  async release(dispatcherId: string, taskId: string): Promise<void> {
    await this.redis.srem(keys.heldBy(dispatcherId), taskId);
  }

  /**
   * Tasks in flight past their deadline (see taskDeadline) that nobody ended: their api died with
   * them. The entries of the live set whose state is gone (it expired, or Redis lost it) leave it on
   * the way: nothing else would remove them.
   */
  async overdue(now: number, limit: number): Promise<TaskSnapshot[]> {
    const overdue: TaskSnapshot[] = [];
    for (const taskId of await this.redis.zrangebyscore(keys.liveTasks, '-inf', now, 'LIMIT', 0, limit)) {
      const task = await this.get(taskId);
      if (task) {
        overdue.push(task);
      } else {
        await this.redis.zrem(keys.liveTasks, taskId);
      }
    }
    return overdue;
  }

  /**
   * Postgres records still in flight, queued before `queuedBefore` (epoch ms), whose state Redis no
   * longer has (lost in a restart without persistence): ended with end(), they end in Postgres. None
   * without Postgres.
   */
  async lostRecords(queuedBefore: number, limit: number): Promise<{ id: string; status: LiveStatus }[]> {
    if (!this.records) {
      return [];
    }
    const { rows } = await this.records.sql<{ id: string; status: LiveStatus }>(
      `SELECT id, status FROM tasks WHERE status IN ${sqlStatusList(LIVE_STATUSES)} AND queued_at < $1 LIMIT $2`,
      [new Date(queuedBefore), limit],
    );
    const lost: { id: string; status: LiveStatus }[] = [];
    for (const row of rows) {
      if ((await this.redis.exists(keys.taskState(row.id))) === 0) {
        lost.push(row);
      }
    }
    return lost;
  }
}
