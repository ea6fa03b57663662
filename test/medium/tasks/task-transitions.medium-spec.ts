import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { TaskRepository, createRedis, KeySpace } from '@app/common';
import type { Ending, NewTask, TaskSnapshot } from '@app/common';
import { REDIS_URL, closeDb, recordsWritten, uniq } from '../../support/stack';
import { TASK_TTLS, createTaskOwners, newTaskOf, startRecordWriter } from './task-fixture';
import type { TaskOwners } from './task-fixture';

/**
 * Every op of the task transitions script (create, claim, first, requeue, end) and every guard, at its
 * edges, through TaskRepository on the real Redis: what each accepts, and that a refused transition
 * changes nothing at all (the state, the client's event stream, the records for Postgres, the
 * dispatcher's held set). Postgres is not needed for the script; the records are written at the end
 * only so that none is left for another suite's writer.
 */
describe('task transitions', () => {
  let redis: Redis;
  let tasks: TaskRepository;
  /** Records must name real rows (foreign keys) when a writer writes them: a real org, key, model, devices. */
  let owners: TaskOwners;
  let devices: string[];
  const dispatcher = uniq('disp');

  beforeAll(async () => {
    redis = createRedis(REDIS_URL);
    // No Postgres fallback: a transition of an unknown task is answered by Redis alone.
    tasks = new TaskRepository(redis, TASK_TTLS);
    owners = await createTaskOwners('medium-transitions');
    devices = owners.deviceIds;
  });

  afterAll(async () => {
    const writer = startRecordWriter();
    try {
      await recordsWritten();
    } finally {
      await writer.stop();
      redis?.disconnect();
      await closeDb();
    }
  });

  const newTask = (): NewTask => newTaskOf(owners);

  async function created(): Promise<NewTask> {
    const task = newTask();
    expect(await tasks.create(task)).toEqual({ ok: true, attempt: 0 });
    return task;
  }

  const claimer = (n: number) => ({
    deviceId: devices[n % 2],
    modelDigest: null,
    dispatcherId: dispatcher,
    token: `tok-${n}`,
  });
  /** An entry of the task's event stream as the dispatcher writes one. */
  const entry = (attempt: number, seq: number, type: string) => [
    'a',
    String(attempt),
    's',
    String(seq),
    'e',
    JSON.stringify([{ type }]),
  ];

  /** The records of this task waiting for the Postgres writers (none runs until the end). */
  async function records(id: string): Promise<number> {
    const all = await redis.xrange(KeySpace.of(redis).records(0), '-', '+');
    return all.filter(([, fields]) => fields.includes(id)).length;
  }

  /** Everything a transition may change. */
  async function observe(id: string) {
    const [state, events, recorded, held] = await Promise.all([
      tasks.get(id),
      redis.xrange(KeySpace.of(redis).taskStream(id), '-', '+'),
      records(id),
      tasks.heldBy(dispatcher),
    ]);
    return { state, events: events.map(([, fields]) => fields), records: recorded, held: held.includes(id) };
  }

  /** Runs a transition that must be refused with `status`, and checks that it changed nothing. */
  async function refused(id: string, status: TaskSnapshot['status'] | null, transition: () => Promise<unknown>) {
    const before = await observe(id);
    expect(await transition()).toEqual({ ok: false, status });
    expect(await observe(id)).toEqual(before);
  }

  const completed: Ending = {
    status: 'completed',
    finishReason: 'stop',
    promptTokens: 3,
    completionTokens: 2,
    outputSha256: 'ab'.repeat(32),
    outputBytes: 7,
    usageSource: 'device',
  };

  describe('create', () => {
    it('makes a queued task at version 0 with one record; the same id again is refused, ended or not', async () => {
      const task = newTask();
      const before = Date.now();
      expect(await tasks.create(task)).toEqual({ ok: true, attempt: 0 });
      const state = await tasks.get(task.id);
      expect(state).toMatchObject({
        id: task.id,
        address: task.address,
        orgId: task.orgId,
        modelId: owners.model,
        line: task.line,
        status: 'queued',
        version: 0,
        attempts: 0,
        deviceId: null,
        assignedAt: null,
        finishedAt: null,
      });
      expect(state!.queuedAt.getTime()).toBeGreaterThanOrEqual(before);
      expect(await observe(task.id)).toMatchObject({ events: [], records: 1, held: false });

      await refused(task.id, 'queued', () => tasks.create({ ...newTask(), id: task.id, orgId: 'another' }));
      await tasks.end(task.id, { status: 'cancelled' }, 'any');
      await refused(task.id, 'cancelled', () => tasks.create(task));
    });
  });

  describe('claim', () => {
    it('takes a queued task as its next attempt, holds it for the dispatcher and tells the client', async () => {
      const task = await created();
      expect(await tasks.claim(task.id, claimer(1))).toEqual({ ok: true, attempt: 1 });
      expect(await tasks.get(task.id)).toMatchObject({
        status: 'assigned',
        attempts: 1,
        version: 5,
        deviceId: devices[1],
        dispatcherId: dispatcher,
        token: 'tok-1',
      });
      const seen = await observe(task.id);
      expect(seen.state!.assignedAt).toBeInstanceOf(Date);
      expect(seen).toMatchObject({ records: 2, held: true });
      expect(seen.events).toEqual([
        ['a', '1', 's', '0', 'e', JSON.stringify([{ type: 'assigned', device_id: devices[1], attempt: 1 }])],
      ]);
    });

    it('is refused for a task that is assigned, streaming or ended, or unknown', async () => {
      const task = await created();
      await tasks.claim(task.id, claimer(1));
      await refused(task.id, 'assigned', () => tasks.claim(task.id, claimer(2)));
      await tasks.firstOutput(task.id, 1, entry(1, 1, 'delta'));
      await refused(task.id, 'streaming', () => tasks.claim(task.id, claimer(2)));
      await tasks.end(task.id, completed, 'any');
      await refused(task.id, 'completed', () => tasks.claim(task.id, claimer(2)));
      const unknown = randomUUID();
      await refused(unknown, null, () => tasks.claim(unknown, claimer(2)));
      expect(await tasks.get(unknown)).toBeNull();
    });
  });

  describe('first output', () => {
    it('is accepted once, for the assigned attempt only, with the entry that carries it', async () => {
      const task = await created();
      await refused(task.id, 'queued', () => tasks.firstOutput(task.id, 0, entry(0, 1, 'delta')));
      await tasks.claim(task.id, claimer(1));
      await refused(task.id, 'assigned', () => tasks.firstOutput(task.id, 2, entry(2, 1, 'delta')));
      await refused(task.id, 'assigned', () => tasks.firstOutput(task.id, 0, entry(0, 1, 'delta')));
      const before = await observe(task.id);

      expect(await tasks.firstOutput(task.id, 1, entry(1, 1, 'delta'))).toEqual({ ok: true, attempt: 1 });
      const after = await observe(task.id);
      expect(after.state).toMatchObject({ status: 'streaming', version: 6, attempts: 1, deviceId: devices[1] });
      expect(after.state!.firstTokenAt).toBeInstanceOf(Date);
      expect(after.events).toEqual([...before.events, entry(1, 1, 'delta')]);
      expect(after).toMatchObject({ records: before.records + 1, held: true });

      await refused(task.id, 'streaming', () => tasks.firstOutput(task.id, 1, entry(1, 2, 'delta')));
      await tasks.end(task.id, completed, 'any');
      await refused(task.id, 'completed', () => tasks.firstOutput(task.id, 1, entry(1, 2, 'delta')));
    });
  });

  describe('requeue', () => {
    it('puts back the assigned attempt before any output: the device and the hold are let go, the attempt counted', async () => {
      const task = await created();
      await refused(task.id, 'queued', () => tasks.requeue(task.id, 0, entry(0, 1, 'requeued')));
      await tasks.claim(task.id, claimer(1));
      await refused(task.id, 'assigned', () => tasks.requeue(task.id, 2, entry(2, 1, 'requeued')));
      const before = await observe(task.id);

      expect(await tasks.requeue(task.id, 1, entry(1, 1, 'requeued'))).toEqual({ ok: true, attempt: 1 });
      const after = await observe(task.id);
      expect(after.state).toMatchObject({
        status: 'queued',
        version: 7,
        attempts: 1,
        deviceId: null,
        dispatcherId: null,
        token: null,
        assignedAt: null,
      });
      expect(after.events).toEqual([...before.events, entry(1, 1, 'requeued')]);
      expect(after).toMatchObject({ records: before.records + 1, held: false });
      await refused(task.id, 'queued', () => tasks.requeue(task.id, 1, entry(1, 2, 'requeued')));

      // The next claim is the next attempt; after its first output there is no requeue.
      expect(await tasks.claim(task.id, claimer(2))).toEqual({ ok: true, attempt: 2 });
      expect(await tasks.get(task.id)).toMatchObject({ status: 'assigned', version: 9, deviceId: devices[0] });
      await tasks.firstOutput(task.id, 2, entry(2, 1, 'delta'));
      await refused(task.id, 'streaming', () => tasks.requeue(task.id, 2, entry(2, 2, 'requeued')));
      await tasks.end(task.id, { status: 'failed', errorCode: 'device_disconnected' }, 'any');
      await refused(task.id, 'failed', () => tasks.requeue(task.id, 2, entry(2, 2, 'requeued')));
    });
  });

  describe('resume', () => {
    it('puts back a streaming attempt with its output: counted as a resume, its first output kept, its next claim checked', async () => {
      const task = await created();
      await refused(task.id, 'queued', () => tasks.resume(task.id, 0, entry(0, 1, 'resumed')));
      await tasks.claim(task.id, claimer(1));
      await tasks.firstOutput(task.id, 1, entry(1, 1, 'delta'));
      const first = (await tasks.get(task.id))!.firstTokenAt;
      await refused(task.id, 'streaming', () => tasks.resume(task.id, 2, entry(2, 2, 'resumed')));
      const before = await observe(task.id);

      expect(await tasks.resume(task.id, 1, entry(1, 2, 'resumed'))).toEqual({ ok: true, attempt: 1 });
      const after = await observe(task.id);
      expect(after.state).toMatchObject({
        status: 'queued',
        version: 7,
        attempts: 1,
        resumes: 1,
        deviceId: null,
        dispatcherId: null,
        token: null,
        firstTokenAt: first,
      });
      expect(after.events).toEqual([...before.events, entry(1, 2, 'resumed')]);
      expect(after).toMatchObject({ records: before.records + 1, held: false });

      // A job that missed the resume (its resumer died before writing the answer so far into it) is refused.
      await refused(task.id, 'resumed' as never, () => tasks.claim(task.id, claimer(2), 0));
      expect(await tasks.claim(task.id, claimer(2), 1)).toEqual({ ok: true, attempt: 2 });
      // The next device's first output does not move the time of the client's first token.
      await tasks.firstOutput(task.id, 2, entry(2, 1, 'delta'));
      expect(await tasks.get(task.id)).toMatchObject({
        status: 'streaming',
        attempts: 2,
        resumes: 1,
        firstTokenAt: first,
      });
      await tasks.end(task.id, completed, { attempt: 2 });
      await refused(task.id, 'completed', () => tasks.resume(task.id, 2, entry(2, 2, 'resumed')));
    });

    it('an ending that carries its first output (held, then all at once) keeps a resumed task’s first time', async () => {
      const task = await created();
      await tasks.claim(task.id, claimer(1));
      await tasks.firstOutput(task.id, 1, entry(1, 1, 'delta'), Date.now() - 500);
      const first = (await tasks.get(task.id))!.firstTokenAt;
      expect(Date.now() - first!.getTime()).toBeGreaterThanOrEqual(500);
      await tasks.resume(task.id, 1, entry(1, 2, 'resumed'));
      await tasks.claim(task.id, claimer(2), 1);
      await tasks.end(task.id, { ...completed, firstTokenAt: Date.now() }, { attempt: 2 });
      expect(await tasks.get(task.id)).toMatchObject({ status: 'completed', firstTokenAt: first });
    });
  });

  describe("the holder's held set (the script touches only the keys it is passed)", () => {
    it('a requeue or an ending that guesses another dispatcher is run again with the holder’s set; the other set is untouched', async () => {
      const other = uniq('other-disp');
      const guessing = new TaskRepository(redis, { ...TASK_TTLS, dispatcherId: other });
      await redis.sadd(KeySpace.of(redis).heldBy(other, 0), 'a-task-of-its-own');
      const requeued = await created();
      await tasks.claim(requeued.id, claimer(1));
      const ended = await created();
      await tasks.claim(ended.id, claimer(2));
      expect((await observe(requeued.id)).held).toBe(true);

      expect(await guessing.requeue(requeued.id, 1, entry(1, 1, 'requeued'))).toEqual({ ok: true, attempt: 1 });
      expect(
        await guessing.end(ended.id, { status: 'failed', errorCode: 'device_disconnected' }, { attempt: 1 }),
      ).toEqual({
        ok: true,
        attempt: 1,
      });
      expect(await tasks.heldBy(dispatcher)).not.toEqual(expect.arrayContaining([requeued.id]));
      expect(await tasks.heldBy(dispatcher)).not.toEqual(expect.arrayContaining([ended.id]));
      expect(await tasks.heldBy(other)).toEqual(['a-task-of-its-own']);
      // Each transition was accepted once: one record each, the events in order.
      expect(await records(requeued.id)).toBe(3);
      expect(await records(ended.id)).toBe(3);
      await redis.del(KeySpace.of(redis).heldBy(other, 0));
    });
  });

  describe('end', () => {
    /** A task in each live status, attempt 1 where it has one. */
    async function inStatus(status: 'queued' | 'assigned' | 'streaming'): Promise<NewTask> {
      const task = await created();
      if (status !== 'queued') {
        await tasks.claim(task.id, claimer(1));
      }
      if (status === 'streaming') {
        await tasks.firstOutput(task.id, 1, entry(1, 1, 'delta'));
      }
      return task;
    }

    it.each(['queued', 'assigned', 'streaming'] as const)(
      'with no guard ends a %s task, with its ending, the final version, the hold let go and the event for the client',
      async (status) => {
        const task = await inStatus(status);
        const before = await observe(task.id);
        const attempts = before.state!.attempts;
        expect(await tasks.end(task.id, completed, 'any', entry(attempts, 2, 'done'))).toEqual({
          ok: true,
          attempt: attempts,
        });
        const after = await observe(task.id);
        expect(after.state).toMatchObject({
          status: 'completed',
          attempts,
          finishReason: 'stop',
          promptTokens: 3,
          completionTokens: 2,
          outputSha256: 'ab'.repeat(32),
          outputBytes: 7,
          usageSource: 'device',
          errorCode: null,
        });
        expect(after.state!.finishedAt).toBeInstanceOf(Date);
        // Above every version an attempt can have (4a+1 … 4a+3), so that no later record replaces it.
        expect(after.state!.version).toBeGreaterThan(4 * 1000 + 3);
        expect(after.events).toEqual([...before.events, entry(attempts, 2, 'done')]);
        expect(after).toMatchObject({ records: before.records + 1, held: false });

        // The first ending wins: another is refused, and changes nothing.
        await refused(task.id, 'completed', () => tasks.end(task.id, { status: 'cancelled' }, 'any', entry(1, 3, 'x')));
      },
    );

    it('writes no event when it is given none, and keeps the fields an ending does not set', async () => {
      const task = await inStatus('streaming');
      const before = await observe(task.id);
      expect(await tasks.end(task.id, { status: 'timed_out', errorCode: 'device_timeout' }, 'any')).toEqual({
        ok: true,
        attempt: 1,
      });
      const after = await observe(task.id);
      expect(after.events).toEqual(before.events);
      expect(after.state).toMatchObject({
        status: 'timed_out',
        errorCode: 'device_timeout',
        finishReason: null,
        completionTokens: null,
        deviceId: devices[1],
      });
      expect(after.state!.firstTokenAt).toEqual(before.state!.firstTokenAt);
    });

    it('guarded by `queued` ends only a task no device holds, a requeued one included', async () => {
      const ending: Ending = { status: 'timed_out', errorCode: 'queue_timeout' };
      for (const status of ['assigned', 'streaming'] as const) {
        const task = await inStatus(status);
        await refused(task.id, status, () => tasks.end(task.id, ending, 'queued', entry(1, 2, 'error')));
      }
      const waiting = await inStatus('queued');
      expect(await tasks.end(waiting.id, ending, 'queued')).toEqual({ ok: true, attempt: 0 });
      const requeued = await inStatus('assigned');
      await tasks.requeue(requeued.id, 1, entry(1, 1, 'requeued'));
      expect(await tasks.end(requeued.id, ending, 'queued')).toEqual({ ok: true, attempt: 1 });
      expect(await tasks.get(requeued.id)).toMatchObject({ status: 'timed_out', errorCode: 'queue_timeout' });
      await refused(requeued.id, 'timed_out', () => tasks.end(requeued.id, ending, 'queued'));
    });

    it('guarded by an attempt ends only that attempt', async () => {
      const ending: Ending = { status: 'failed', errorCode: 'device_disconnected' };
      const task = await inStatus('assigned');
      await refused(task.id, 'assigned', () => tasks.end(task.id, ending, { attempt: 2 }, entry(2, 1, 'error')));
      await refused(task.id, 'assigned', () => tasks.end(task.id, ending, { attempt: 0 }, entry(0, 1, 'error')));
      await tasks.requeue(task.id, 1, entry(1, 1, 'requeued'));
      await tasks.claim(task.id, claimer(2));
      await tasks.firstOutput(task.id, 2, entry(2, 1, 'delta'));
      // The first attempt's dispatcher, late: refused.
      await refused(task.id, 'streaming', () => tasks.end(task.id, ending, { attempt: 1 }, entry(1, 2, 'error')));
      expect(await tasks.end(task.id, ending, { attempt: 2 }, entry(2, 2, 'error'))).toEqual({ ok: true, attempt: 2 });
      await refused(task.id, 'failed', () => tasks.end(task.id, completed, { attempt: 2 }));
    });
  });

  it('an unknown task: every transition but create is refused with no status, and creates nothing', async () => {
    const id = randomUUID();
    await refused(id, null, () => tasks.claim(id, claimer(1)));
    await refused(id, null, () => tasks.firstOutput(id, 1, entry(1, 1, 'delta')));
    await refused(id, null, () => tasks.requeue(id, 1, entry(1, 1, 'requeued')));
    for (const guard of ['any', 'queued', { attempt: 1 }] as const) {
      await refused(id, null, () => tasks.end(id, completed, guard, entry(1, 1, 'done')));
    }
    expect(await observe(id)).toEqual({ state: null, events: [], records: 0, held: false });
  });
});
