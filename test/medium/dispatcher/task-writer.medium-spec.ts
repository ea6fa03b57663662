import type { Redis } from 'ioredis';
import { KeySpace, TaskRepository, createRedis, decodeStreamEntry } from '@app/common';
import type { TaskEvent } from '@app/common';
import { TaskWriter } from '../../../apps/dispatcher/src/relay/task-writer';
import { REDIS_URL, closeDb, sleep } from '../../support/stack';
import { TASK_TTLS, createTaskOwners, newTaskOf } from '../tasks/task-fixture';
import type { TaskOwners } from '../tasks/task-fixture';

/**
 * What the dispatcher writes to a task's stream for the api, on the real Redis: a streaming client's
 * output goes out as it comes; a client that gets its answer whole has its output held for the ending,
 * in one entry and one transition instead of one per token and a `first` transition besides.
 */
describe('TaskWriter', () => {
  let redis: Redis;
  let tasks: TaskRepository;
  let owners: TaskOwners;
  const hooks = { onRefused: () => undefined, onLost: () => undefined, onEndFailed: () => undefined };
  const delta = (content: string): TaskEvent => ({ type: 'delta', choices: [{ index: 0, content }] });
  const done: TaskEvent = { type: 'done', finish_reasons: ['stop'], usage: null };

  beforeAll(async () => {
    redis = createRedis(REDIS_URL);
    tasks = new TaskRepository(redis, TASK_TTLS);
    owners = await createTaskOwners('medium-writer', 1);
  });

  afterAll(async () => {
    redis?.disconnect();
    await closeDb();
  });

  /** A claimed task, its stream's key, and a writer of the given kind for its attempt. */
  async function assigned(streamed: boolean) {
    const task = newTaskOf(owners, { line: 'medium-writer-line', stream: streamed });
    expect((await tasks.create(task)).ok).toBe(true);
    const claim = await tasks.claim(task.id, {
      deviceId: owners.deviceIds[0],
      modelDigest: null,
      dispatcherId: 'disp',
      token: 'tok',
    });
    if (!claim.ok) {
      throw new Error('the claim was refused');
    }
    const key = KeySpace.of(redis).taskStream(task.id);
    const writer = new TaskWriter(redis, tasks, task.id, key, 60, claim.attempt, 60_000, hooks, !streamed);
    return { key, writer, taskId: task.id };
  }

  /** Waits until the stream holds `n` entries. */
  async function entries(key: string, n: number): Promise<void> {
    while ((await redis.xlen(key)) < n) {
      await sleep(5);
    }
  }

  /** The stream's entries: how many, and every event in order with its sequence number. */
  async function written(key: string) {
    const all = (await redis.xrange(key, '-', '+')).map(([, fields]) => decodeStreamEntry(fields));
    return {
      count: all.length,
      events: all.flatMap((e) => e.events.map((event, i) => ({ seq: e.seq + i, type: event.type }))),
      text: all.flatMap((e) => e.events.flatMap((ev) => (ev.type === 'delta' ? [ev.choices[0].content] : []))).join(''),
      heldMs: all.map((e) => e.heldMs ?? 0),
    };
  }

  it('streamed: each output goes out as it comes, numbered after the assignment', async () => {
    const { key, writer } = await assigned(true);
    const words = ['one', ' two', ' three', ' four'];
    for (const [i, word] of words.entries()) {
      writer.push(delta(word));
      await entries(key, 2 + i);
    }
    expect((await writer.close({ kind: 'end', ending: { status: 'completed' }, event: done }))?.ok).toBe(true);
    const out = await written(key);
    expect(out.count).toBe(1 + words.length + 1);
    expect(out.text).toBe('one two three four');
    expect(out.events.map((e) => e.seq)).toEqual([0, 1, 2, 3, 4, 5]);
  });

  it('not streamed: all output, the first included, goes out with the ending: one entry, one transition', async () => {
    const { key, writer, taskId } = await assigned(false);
    const before = Date.now();
    writer.push(delta('one'));
    const after = Date.now();
    await sleep(100);
    for (const word of [' two', ' three', ' four']) {
      writer.push(delta(word));
    }
    // Held: nothing reaches the stream until the ending, and the task stays `assigned`.
    await sleep(100);
    expect(await redis.xlen(key)).toBe(1);
    expect((await tasks.get(taskId))?.status).toBe('assigned');
    expect((await writer.close({ kind: 'end', ending: { status: 'completed' }, event: done }))?.ok).toBe(true);
    const out = await written(key);
    expect(out.count).toBe(2);
    expect(out.text).toBe('one two three four');
    expect(out.events).toEqual([
      { seq: 0, type: 'assigned' },
      { seq: 1, type: 'delta' },
      { seq: 2, type: 'delta' },
      { seq: 3, type: 'delta' },
      { seq: 4, type: 'delta' },
      { seq: 5, type: 'done' },
    ]);
    // The api dates the first output back by how long it was held; the record keeps when it came.
    expect(out.heldMs[1]).toBeGreaterThanOrEqual(190);
    const task = await tasks.get(taskId);
    expect(task?.status).toBe('completed');
    expect(task?.firstTokenAt?.getTime()).toBeGreaterThanOrEqual(before);
    expect(task?.firstTokenAt?.getTime()).toBeLessThanOrEqual(after);
  });

  it("not streamed: held output goes out with the next output a second after the last write (the claim's)", async () => {
    const { key, writer, taskId } = await assigned(false);
    const before = Date.now();
    writer.push(delta('one'));
    const after = Date.now();
    // Past the hold (HOLD_MAX_MS), the next output takes what is held with it: the api sees the task at work.
    await sleep(1_100);
    expect(await redis.xlen(key)).toBe(1);
    writer.push(delta(' two'));
    await entries(key, 2);
    const out = await written(key);
    expect(out.text).toBe('one two');
    const task = await tasks.get(taskId);
    expect(task?.status).toBe('streaming');
    expect(task?.firstTokenAt?.getTime()).toBeGreaterThanOrEqual(before);
    expect(task?.firstTokenAt?.getTime()).toBeLessThanOrEqual(after);
    writer.push(delta(' three'));
    await writer.close({ kind: 'end', ending: { status: 'completed' }, event: done });
    expect((await written(key)).text).toBe('one two three');
  });

  it('not streamed: held first output is written by the first transition before a resume', async () => {
    const { key, writer, taskId } = await assigned(false);
    writer.push(delta('one'));
    const result = await writer.close({ kind: 'resume', event: { type: 'resumed', reason: 'device_disconnected' } });
    expect(result?.ok).toBe(true);
    const out = await written(key);
    expect(out.count).toBe(3);
    expect(out.events.map((e) => e.type)).toEqual(['assigned', 'delta', 'resumed']);
    const task = await tasks.get(taskId);
    expect(task?.status).toBe('queued');
    expect(task?.resumes).toBe(1);
    expect(task?.firstTokenAt).not.toBeNull();
  });
});
