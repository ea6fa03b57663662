import { setTimeout as delay } from 'node:timers/promises';
import type { RedisClient } from '../redis/redis';
import type { TaskStatus } from '../prisma/generated/enums';
import { SpendCounter } from '../budgets/spend-counter';
import type { Spend } from '../budgets/spend-counter';
import { DeviceStateRepository } from '../live/device-state-repository';
import { queueOfLine } from '../queues/queues';
import { ServiceTimes } from '../queues/service-time';
import { KeySpace } from '../redis/key-space';
import type { SqlRunner } from './task-record-writer';
import type { EndGuard, Ending, NewTask, StreamFields, TaskSnapshot, TransitionResult } from './task-state';
import { parseSnapshot } from './task-state';
import { LIVE_STATUSES, sqlStatusList } from './task-statuses';
import type { LiveStatus } from './task-statuses';
import {
  claimPairs,
  creationArgs,
  endRecordStatement,
  endingPairs,
  firstOutputPairs,
  guardArg,
} from './task-transition-args';
import type { Claimant } from './task-transition-args';
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
  /**
   * The dispatcher this process is, if it is one: its held set is the one a requeue or an ending it
   * asks for usually touches (see TASK_TRANSITIONS_LUA: a wrong guess costs one more round trip).
   */
  dispatcherId?: string;
}

/** How many times a transition follows a task's holder that moved on between two tries. */
const HOLDER_TRIES = 3;

type TransitionOp = 'create' | 'claim' | 'first' | 'requeue' | 'resume' | 'end';

interface TransitionCommand {
  syTask(
    state: string,
    records: string,
    live: string,
    stream: string,
    held: string,
    op: TransitionOp,
    now: number,
    guard: string,
    ttlMs: number,
    streamTtlS: number,
    pairs: number,
    holder: string,
    ...rest: (string | number)[]
  ): Promise<TransitionReply>;
}

/**
 * The script's answer: accepted (1) with the attempt, the device concerned and its address, and a
 * completed task's line and time on its device; refused (0) with the status; or (2) the dispatcher
 * that holds the task, when the script was given another's held set.
 */
type TransitionReply =
  [1, number, string, string, string, number | string, string?, string?, string?] | [0, string] | [2, string];

/**
 * The one owner of a task's transitions: create, claim, first output, requeue and every ending. The
 * api and the dispatchers call it; nothing else changes a task. Each call is one Redis round trip
 * (see TASK_TRANSITIONS_LUA); the Postgres record follows from the records stream. It owns the task
 * indexes too (the live set, the dispatchers' held sets): the reaper and the takeover sweep them
 * through it (overdue, release), never behind the script's back.
 */
export class TaskRepository {
  private readonly redis: RedisClient & TransitionCommand;
  private readonly devices: DeviceStateRepository;
  private readonly serviceTimes: ServiceTimes;
  private readonly spend: SpendCounter;
  private readonly keys: KeySpace;

  constructor(
    redis: RedisClient,
    private readonly options: TaskRepositoryOptions,
    /** Postgres, for endings of tasks whose state Redis lost. */
    private readonly records?: SqlRunner,
  ) {
    redis.defineCommand('syTask', { numberOfKeys: 5, lua: TASK_TRANSITIONS_LUA });
    this.redis = redis as RedisClient & TransitionCommand;
    this.keys = KeySpace.of(redis);
    this.devices = new DeviceStateRepository(redis);
    this.serviceTimes = new ServiceTimes(redis);
    this.spend = new SpendCounter(redis);
  }

  /**
   * Runs a transition. `holder` is the dispatcher whose held set it touches: the claimer's for a claim,
   * else a guess (this process's own) that the script corrects. The device's live state and the
   * queue's service time are written after it: keys of the device and the queue, not the task's.
   */
  private async run(
    taskId: string,
    op: TransitionOp,
    guard: string,
    pairs: (string | number)[],
    event: StreamFields = [],
    ttlMs = this.options.endedTtlMs,
    holder = this.options.dispatcherId ?? '',
    tokens = 0,
  ): Promise<TransitionResult> {
    // The task's keys and its partition's indexes: one slot on a cluster.
    const k = this.keys.partitionOf(taskId);
    for (let tries = 1; ; tries++) {
      const reply = await this.redis.syTask(
        this.keys.taskState(taskId),
        this.keys.records(k),
        this.keys.liveTasks(k),
        this.keys.taskStream(taskId),
        this.keys.heldBy(holder, k),
        op,
        Date.now(),
        guard,
        ttlMs,
        this.options.streamTtlS,
        pairs.length / 2,
        holder,
        ...pairs,
        ...event,
      );
      if (reply[0] === 2 && tries < HOLDER_TRIES) {
        holder = reply[1];
        continue;
      }
      if (reply[0] !== 1) {
        // A holder that kept moving (HOLDER_TRIES times) is a task that some dispatcher keeps taking:
        // refused as the live state it is in.
        return { ok: false, status: reply[0] === 0 ? (reply[1] as TaskStatus) || null : 'assigned' };
      }
      const [, attempt, deviceId, address, line, serviceMs, budgets, orgId, apiKeyId] = reply;
      this.afterwards(op, deviceId, address, line, Number(serviceMs));
      if (budgets && orgId) {
        this.count({ orgId, apiKeyId: apiKeyId || null, scope: budgets, tokens, at: Date.now() });
      }
      return { ok: true, attempt: Number(attempt) };
    }
  }

  /**
   * What an accepted transition changes outside the task's keys: the task shown in its device's live
   * state, and a completed task's time on its device in its queue's service time. Not waited for, and
   * a failure only leaves the operators' view or an estimate a step behind.
   */
  private afterwards(op: TransitionOp, deviceId: string, address: string, line: string, serviceMs: number): void {
    if (deviceId !== '') {
      void this.devices.holding(deviceId, op === 'claim' ? 'set' : 'clear', address).catch(() => undefined);
    }
    if (line.includes('.') && serviceMs >= 0) {
      this.serviceTimes.record(queueOfLine(line), serviceMs);
    }
  }

  /**
   * An ended task's tokens, added to the monthly budgets its api said they count against. Not waited
   * for: a count that fails leaves the counter short until the budget reconciler raises it to what
   * Postgres counted (docs/architecture.md, "Budgets").
   */
  private count(spend: Spend): void {
    this.spend.add(spend).catch(() => undefined);
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
   * of the attempt) is written to the task's stream only if the claim is accepted. `resumes` is how
   * many times the job says the task was resumed: a claim of a job that missed a resume is refused
   * (status `resumed`), since its device would start the answer again.
   */
  claim(taskId: string, by: Claimant, resumes = 0): Promise<TransitionResult> {
    return this.run(taskId, 'claim', String(resumes), claimPairs(by), [], this.options.endedTtlMs, by.dispatcherId);
  }

  /**
   * The first output of an attempt: written with the entry that carries it. `at` (epoch ms) is when it
   * came, if it waited before being written (held for a client that does not stream); else now.
   */
  firstOutput(taskId: string, attempt: number, entry: StreamFields, at?: number): Promise<TransitionResult> {
    return this.run(taskId, 'first', String(attempt), firstOutputPairs(at), entry);
  }

  /** The attempt's device is gone before any output: the task waits for another. */
  requeue(taskId: string, attempt: number, event: StreamFields): Promise<TransitionResult> {
    return this.run(taskId, 'requeue', String(attempt), [], event);
  }

  /**
   * The attempt's device was lost after output reached the client: the task waits for a device that
   * continues the answer (see Resumer), and counts one more resume.
   */
  resume(taskId: string, attempt: number, event: StreamFields): Promise<TransitionResult> {
    return this.run(taskId, 'resume', String(attempt), [], event);
  }

  /** Ends the task if `guard` allows it; `event` reaches the client only then. */
  async end(taskId: string, ending: Ending, guard: EndGuard, event: StreamFields = []): Promise<TransitionResult> {
    const pairs = endingPairs(ending);
    const g = guardArg(guard);
    let result: TransitionResult;
    try {
      const tokens = (ending.promptTokens ?? 0) + (ending.completionTokens ?? 0);
      result = await this.run(taskId, 'end', g, pairs, event, undefined, undefined, tokens);
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
    return parseSnapshot(await this.redis.hgetall(this.keys.taskState(taskId)));
  }

  /** The tasks a dispatcher holds (its held sets, one per partition, kept by the transitions). */
  async heldBy(dispatcherId: string): Promise<string[]> {
    const held = await Promise.all(
      this.keys.partitions.map((k) => this.redis.smembers(this.keys.heldBy(dispatcherId, k))),
    );
    return held.flat();
  }

  /**
   * A dead dispatcher's hold on a task is over: a survivor rescued the task (its requeue or ending
   * left the set already) or found nothing to rescue (the task ended, moved on, or its state is gone).
   */
  async release(dispatcherId: string, taskId: string): Promise<void> {
    await this.redis.srem(this.keys.heldBy(dispatcherId, this.keys.partitionOf(taskId)), taskId);
  }

  /**
   * Tasks in flight past their deadline (see taskDeadline) that nobody ended: their api died with
   * them. The entries of the live set whose state is gone (it expired, or Redis lost it) leave it on
   * the way: nothing else would remove them. At most `limit` of them per partition.
   */
  async overdue(now: number, limit: number): Promise<TaskSnapshot[]> {
    const overdue: TaskSnapshot[] = [];
    for (const k of this.keys.partitions) {
      const live = this.keys.liveTasks(k);
      for (const taskId of await this.redis.zrangebyscore(live, '-inf', now, 'LIMIT', 0, limit)) {
        const task = await this.get(taskId);
        if (task) {
          overdue.push(task);
        } else {
          await this.redis.zrem(live, taskId);
        }
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
      if ((await this.redis.exists(this.keys.taskState(row.id))) === 0) {
        lost.push(row);
      }
    }
    return lost;
  }
}
