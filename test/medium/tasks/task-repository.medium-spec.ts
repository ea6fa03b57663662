import { Redis } from 'ioredis';
import type { Pool } from 'pg';
import { TaskRecordWriter, TaskRepository, createLogger, createRedis, KeySpace, taskStateCodec } from '@app/common';
import type { NewTask, SqlRunner, TransitionResult } from '@app/common';
import { createPool } from '../../../libs/common/src/prisma/pool';
import { ENDED_VERSION } from '../../../libs/common/src/tasks/task-transitions.lua';
import { DATABASE_URL, REDIS_URL, closeDb, db, sleep, uniq } from '../../support/stack';
import { TASK_TTLS, createTaskOwners, newTaskOf } from './task-fixture';
import type { TaskOwners } from './task-fixture';

/**
 * The task repository on the real Redis (its transitions are one Lua script) and Postgres (written
 * behind by a TaskRecordWriter, and ended directly when Redis lost a task's state).
 */
describe('TaskRepository', () => {
  let redis: Redis;
  let pool: Pool;
  let sql: SqlRunner;
  let tasks: TaskRepository;
  let writer: TaskRecordWriter;
  /** A record names its org, key, model and device (foreign keys). */
  let owners: TaskOwners;
  let deviceIds: string[];
  const options = TASK_TTLS;

  beforeAll(async () => {
    redis = createRedis(REDIS_URL);
    pool = createPool(DATABASE_URL, 2);
    sql = { sql: (text, values) => pool.query(text, values) };
    tasks = new TaskRepository(redis, options, sql);
    writer = new TaskRecordWriter(createRedis(REDIS_URL), sql, createLogger('test', 'silent'), uniq('writer'));
    writer.start();
    owners = await createTaskOwners('medium-repo', 6);
    deviceIds = owners.deviceIds;
  });

  afterAll(async () => {
    await writer?.stop();
    redis?.disconnect();
    await pool?.end();
    await closeDb();
  });

  const newTask = (): NewTask => newTaskOf(owners, { line: 'medium-line' });

  function create(task: NewTask): Promise<TransitionResult> {
    return tasks.create(task);
  }

  /** The task's row once the writer has written (at least) the given version. */
  async function row(id: string, version: number, timeoutMs = 10_000) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = await db().task.findUnique({ where: { id } });
      if (found && found.recordVersion >= version) {
        return found;
      }
      if (Date.now() > deadline) {
        throw new Error(`task ${id} has no record at version ${version} (has ${found?.recordVersion ?? 'none'})`);
      }
      await sleep(20);
    }
  }

  /** Until every record appended so far was written and acknowledged. */
  async function drained(timeoutMs = 10_000) {
    const deadline = Date.now() + timeoutMs;
    while ((await redis.xlen(KeySpace.of(redis).records(0))) > 0) {
      if (Date.now() > deadline) {
        throw new Error('the task records were not written');
      }
      await sleep(20);
    }
  }

  /** The task's event stream: (attempt, seq, events) per entry. */
  async function events(id: string) {
    const entries = await redis.xrange(KeySpace.of(redis).taskStream(id), '-', '+');
    return entries.map(([, f]) => {
      const h = Object.fromEntries(Array.from({ length: f.length / 2 }, (_, i) => [f[2 * i], f[2 * i + 1]]));
      return { a: h.a, s: h.s, e: JSON.parse(h.e) as { type: string }[] };
    });
  }

  /** Claimant n; an odd one's device announced a digest, an even one's none. */
  const by = (n: number) => ({
    deviceId: deviceIds[n % deviceIds.length],
    modelDigest: n % 2 === 1 ? `sha256:${String(n).padStart(64, '0')}` : null,
    dispatcherId: `disp-${n}`,
    token: `tok-${n}`,
  });
  const entry = (attempt: number, seq: number, events: object[]) => [
    'a',
    String(attempt),
    's',
    String(seq),
    'e',
    JSON.stringify(events),
  ];

  it('create → claim → requeue → claim → first → end, each conditional on the state it expects', async () => {
    const task = newTask();
    expect(await create(task)).toEqual({ ok: true, attempt: 0 });
    // The same id twice: refused with the status it has.
    expect(await create(task)).toEqual({ ok: false, status: 'queued' });
    expect(await tasks.get(task.id)).toMatchObject({ status: 'queued', version: 0, attempts: 0 });
    expect(await redis.zscore(KeySpace.of(redis).liveTasks(0), task.id)).toBe(String(task.deadline));

    const first = by(1);
    expect(await tasks.claim(task.id, first)).toEqual({ ok: true, attempt: 1 });
    // A second claim of an assigned task is refused.
    expect(await tasks.claim(task.id, by(9))).toEqual({ ok: false, status: 'assigned' });
    expect(await tasks.get(task.id)).toMatchObject({
      status: 'assigned',
      attempts: 1,
      version: 5,
      deviceId: first.deviceId,
      modelDigest: first.modelDigest,
      dispatcherId: 'disp-1',
      token: 'tok-1',
    });
    expect(await tasks.heldBy('disp-1')).toEqual([task.id]);

    // Only the attempt's own requeue counts.
    expect(await tasks.requeue(task.id, 2, entry(2, 1, [{ type: 'requeued' }]))).toEqual({
      ok: false,
      status: 'assigned',
    });
    expect(await tasks.requeue(task.id, 1, entry(1, 1, [{ type: 'requeued', reason: 'x' }]))).toEqual({
      ok: true,
      attempt: 1,
    });
    const requeued = await tasks.get(task.id);
    expect(requeued).toMatchObject({
      status: 'queued',
      version: 7,
      attempts: 1,
      deviceId: null,
      modelDigest: null,
      token: null,
    });
    expect(await tasks.heldBy('disp-1')).toEqual([]);

    const second = by(2);
    expect(await tasks.claim(task.id, second)).toEqual({ ok: true, attempt: 2 });
    // A late first output of the first attempt is refused; the second's is accepted.
    expect(await tasks.firstOutput(task.id, 1, entry(1, 1, [{ type: 'delta' }]))).toEqual({
      ok: false,
      status: 'assigned',
    });
    expect(await tasks.firstOutput(task.id, 2, entry(2, 1, [{ type: 'delta' }]))).toEqual({ ok: true, attempt: 2 });
    expect(await tasks.get(task.id)).toMatchObject({ status: 'streaming', version: 10 });
    // Requeue is only before any output.
    expect(await tasks.requeue(task.id, 2, [])).toEqual({ ok: false, status: 'streaming' });

    const ending = {
      status: 'completed' as const,
      finishReason: 'stop',
      promptTokens: 3,
      completionTokens: 1,
      outputSha256: 'ab'.repeat(32),
      outputBytes: 1,
      usageSource: 'device' as const,
    };
    const done = entry(2, 2, [{ type: 'done' }]);
    expect(await tasks.end(task.id, ending, { attempt: 1 }, done)).toEqual({ ok: false, status: 'streaming' });
    expect(await tasks.end(task.id, ending, 'queued', done)).toEqual({ ok: false, status: 'streaming' });
    expect(await tasks.end(task.id, ending, { attempt: 2 }, done)).toEqual({ ok: true, attempt: 2 });
    // The first ending wins.
    expect(await tasks.end(task.id, { status: 'cancelled' }, 'any')).toEqual({ ok: false, status: 'completed' });
    expect(await redis.zscore(KeySpace.of(redis).liveTasks(0), task.id)).toBeNull();
    expect(await tasks.heldBy('disp-2')).toEqual([]);

    // The client saw: assigned (1), requeued, assigned (2), the first output, done; refused events never.
    expect((await events(task.id)).map((e) => [e.a, e.s, e.e.map((x) => x.type).join()])).toEqual([
      ['1', '0', 'assigned'],
      ['1', '1', 'requeued'],
      ['2', '0', 'assigned'],
      ['2', '1', 'delta'],
      ['2', '2', 'done'],
    ]);

    const record = await row(task.id, ENDED_VERSION);
    expect(record).toMatchObject({
      status: 'completed',
      attempts: 2,
      deviceId: second.deviceId,
      // The second device announced no digest: the first one's is not left beside it.
      modelDigest: null,
      finishReason: 'stop',
      promptTokens: 3,
      completionTokens: 1,
      outputSha256: 'ab'.repeat(32),
      errorCode: null,
      orgId: owners.tenant.org.id,
      apiKeyId: owners.tenant.keyId,
    });
    const times = [record.queuedAt, record.assignedAt, record.firstTokenAt, record.finishedAt].map((d) => d!.getTime());
    expect([...times].sort((x, y) => x - y)).toEqual(times);
  });

  it('queued-only endings: a queue timeout ends a waiting task, not one a device took', async () => {
    const waiting = newTask();
    await create(waiting);
    const ending = { status: 'timed_out' as const, errorCode: 'queue_timeout' };
    expect(await tasks.end(waiting.id, ending, 'queued')).toEqual({ ok: true, attempt: 0 });

    const taken = newTask();
    await create(taken);
    await tasks.claim(taken.id, by(3));
    expect(await tasks.end(taken.id, ending, 'queued')).toEqual({ ok: false, status: 'assigned' });
    expect(await row(waiting.id, ENDED_VERSION)).toMatchObject({ status: 'timed_out', errorCode: 'queue_timeout' });
  });

  it('Redis lost the state: the ending goes to the Postgres record, once, and nothing written behind replaces it', async () => {
    const task = newTask();
    await create(task);
    await tasks.claim(task.id, by(4));
    await row(task.id, 5);
    await redis.del(KeySpace.of(redis).taskState(task.id));

    const ending = { status: 'failed' as const, errorCode: 'device_disconnected', completionTokens: 0 };
    expect(await tasks.end(task.id, ending, { attempt: 1 })).toEqual({ ok: true, attempt: 0, recovered: true });
    expect(await tasks.end(task.id, { status: 'cancelled' }, 'any')).toEqual({ ok: false, status: null });
    const record = await db().task.findUniqueOrThrow({ where: { id: task.id } });
    expect(record).toMatchObject({ status: 'failed', errorCode: 'device_disconnected', recordVersion: ENDED_VERSION });
    expect(record.finishedAt).toBeInstanceOf(Date);

    // A queued-only ending does not end a record that was assigned.
    const assigned = newTask();
    await create(assigned);
    await tasks.claim(assigned.id, by(5));
    await row(assigned.id, 5);
    await redis.del(KeySpace.of(redis).taskState(assigned.id));
    expect(await tasks.end(assigned.id, { status: 'timed_out', errorCode: 'queue_timeout' }, 'queued')).toEqual({
      ok: false,
      status: null,
    });
    expect(await db().task.findUniqueOrThrow({ where: { id: assigned.id } })).toMatchObject({ status: 'assigned' });
  });

  it('Redis lost the state before the row was written: the direct ending waits for the row, and stands', async () => {
    // The records are still with a writer (here: none runs until 500 ms after the ending is asked for).
    await writer.stop();
    const task = newTask();
    await create(task);
    await tasks.claim(task.id, by(1));
    await redis.del(KeySpace.of(redis).taskState(task.id));
    const later = sleep(500).then(() => {
      writer = new TaskRecordWriter(createRedis(REDIS_URL), sql, createLogger('test', 'silent'), uniq('writer'));
      writer.start();
    });
    const ending = { status: 'failed' as const, errorCode: 'device_disconnected' };
    const result = await tasks.end(task.id, ending, { attempt: 1 });
    await later;
    expect(result).toEqual({ ok: true, attempt: 0, recovered: true });
    await drained();
    expect(await db().task.findUniqueOrThrow({ where: { id: task.id } })).toMatchObject({
      status: 'failed',
      errorCode: 'device_disconnected',
      recordVersion: ENDED_VERSION,
    });
  });

  it('Redis unreachable: the ending goes to the Postgres record directly', async () => {
    const task = newTask();
    await create(task);
    await row(task.id, 0);
    const down = new Redis('redis://127.0.0.1:1', {
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    try {
      const cut = new TaskRepository(down, options, sql);
      expect(await cut.end(task.id, { status: 'cancelled', errorCode: 'client_disconnected' }, 'any')).toEqual({
        ok: true,
        attempt: 0,
        recovered: true,
      });
      // Without Postgres to fall back on, the failure is the caller's.
      await expect(new TaskRepository(down, options).end(task.id, { status: 'cancelled' }, 'any')).rejects.toThrow();
    } finally {
      down.disconnect();
    }
    expect(await db().task.findUniqueOrThrow({ where: { id: task.id } })).toMatchObject({
      status: 'cancelled',
      errorCode: 'client_disconnected',
    });
    // The state that Redis still holds ends later, but its record can no longer go back.
    expect(await tasks.end(task.id, { status: 'completed' }, 'any')).toEqual({ ok: true, attempt: 0 });
    await drained();
    expect(await db().task.findUniqueOrThrow({ where: { id: task.id } })).toMatchObject({ status: 'cancelled' });
  });
  it("a task's kind goes from its creation to its record; a record written before kinds is a chat task's", async () => {
    const embedding = newTaskOf(owners, { line: 'medium-line', kind: 'embedding' });
    const chat = newTask();
    for (const task of [embedding, chat]) {
      expect(await create(task)).toMatchObject({ ok: true });
    }
    expect(await tasks.get(embedding.id)).toMatchObject({ kind: 'embedding' });
    expect(await tasks.get(chat.id)).toMatchObject({ kind: 'chat' });
    await tasks.claim(embedding.id, by(3));
    expect(await tasks.end(embedding.id, { status: 'completed', promptTokens: 12 }, 'any')).toMatchObject({ ok: true });
    expect(await row(embedding.id, ENDED_VERSION)).toMatchObject({ kind: 'embedding', status: 'completed' });
    expect(await row(chat.id, 0)).toMatchObject({ kind: 'chat', status: 'queued' });

    // What an api of the release before wrote: the same state without the kind field.
    const older = newTask();
    const { kind: _kind, ...fields } = taskStateCodec.encode({
      ...older,
      status: 'queued',
      version: 0,
      attempts: 0,
      queuedAt: new Date(),
    });
    await redis.xadd(KeySpace.of(redis).records(0), '*', ...Object.entries(fields).flat());
    expect(await row(older.id, 0)).toMatchObject({ kind: 'chat', status: 'queued' });
  });

  it("a task's records that come together are written once, as the latest of them", async () => {
    await writer.stop();
    const statements: string[][] = [];
    const counting: SqlRunner = {
      sql: (text, values) => {
        statements.push((values?.[0] as string[]) ?? []);
        return sql.sql(text, values);
      },
    };
    writer = new TaskRecordWriter(createRedis(REDIS_URL), counting, createLogger('test', 'silent'), uniq('writer'));
    writer.start();
    const task = newTask();
    // Three records (create, claim, end) 40 ms apart, as a short task's come: a writer that wrote each
    // as it arrived would run three statements; lingering, it writes the latest once (twice if the
    // machine stalls it past its linger).
    await create(task);
    await sleep(40);
    await tasks.claim(task.id, by(2));
    await sleep(40);
    expect(await tasks.end(task.id, { status: 'completed', finishReason: 'stop' }, 'any')).toMatchObject({ ok: true });
    expect(await row(task.id, ENDED_VERSION)).toMatchObject({ status: 'completed', attempts: 1 });
    expect(statements.filter((ids) => ids.includes(task.id)).length).toBeLessThan(3);
  });

  it('a writer that cannot write leaves the records it took to the other writers', async () => {
    let tries = 0;
    const failing: SqlRunner = { sql: () => Promise.reject(new Error(`no Postgres here (try ${++tries})`)) };
    await writer.stop();
    const bad = new TaskRecordWriter(createRedis(REDIS_URL), failing, createLogger('test', 'silent'), uniq('bad'));
    bad.start();
    try {
      const task = newTask();
      await create(task);
      // The bad writer takes the record (it is the only writer) and cannot write it.
      for (
        let i = 0;
        i < 100 && !(await redis.xpending(KeySpace.of(redis).records(0), 'writers', '-', '+', 10)).length;
        i++
      ) {
        await sleep(20);
      }
      writer = new TaskRecordWriter(createRedis(REDIS_URL), sql, createLogger('test', 'silent'), uniq('writer'));
      writer.start();
      // While the bad writer still runs, a good one writes the record; the bad one, paused after its
      // failure, did not go on taking it (it would have tried again and again, holding it).
      expect((await row(task.id, 0, 30_000)).status).toBe('queued');
      expect(tries).toBeLessThanOrEqual(2);
    } finally {
      await bad.stop();
    }
  });
});
