import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import type { Redis } from 'ioredis';
import { TaskRepository, createRedis } from '@app/common';
import type { EndGuard, Ending, NewTask, TaskSnapshot, TaskStatus, TransitionResult } from '@app/common';
import { REDIS_URL, closeDb, db, recordsWritten, uniq } from '../../support/stack';
import { TASK_TTLS, createTaskOwners, newTaskOf, startRecordWriter } from './task-fixture';
import type { RecordWriterFixture, TaskOwners } from './task-fixture';

/** Fixed, so that CI runs the same sequences every time (a failure prints the seed and the shrunk sequence). */
const SEED = 0x7a5c_0033;
const RUNS = 200;

type Op =
  | { op: 'create' }
  | { op: 'claim'; device: number }
  | { op: 'first'; attempt: number }
  | { op: 'requeue'; attempt: number }
  | { op: 'end'; status: Ending['status']; guard: EndGuard };

const ENDED: readonly TaskStatus[] = ['completed', 'failed', 'cancelled', 'timed_out'];

/**
 * Attempts 0–3 in guards: mostly the first two (the ones a task reaches), and now and then one it has
 * not (none yet, or one past). Creates come first most of the time, and now and then later (again, or
 * for the first time). Endings are rarer than the rest: each one is the end of what a sequence can show.
 */
const attempt = fc.oneof(
  { arbitrary: fc.constant(1), weight: 4 },
  { arbitrary: fc.constant(2), weight: 3 },
  { arbitrary: fc.constantFrom(0, 3), weight: 1 },
);
const op: fc.Arbitrary<Op> = fc.oneof(
  { arbitrary: fc.constant({ op: 'create' as const }), weight: 1 },
  { arbitrary: fc.record({ op: fc.constant('claim' as const), device: fc.integer({ min: 0, max: 1 }) }), weight: 4 },
  { arbitrary: fc.record({ op: fc.constant('first' as const), attempt }), weight: 3 },
  { arbitrary: fc.record({ op: fc.constant('requeue' as const), attempt }), weight: 4 },
  {
    arbitrary: fc.record({
      op: fc.constant('end' as const),
      status: fc.constantFrom(...(ENDED as Ending['status'][])),
      guard: fc.oneof(
        fc.constant<EndGuard>('any'),
        fc.constant<EndGuard>('queued'),
        attempt.map((n): EndGuard => ({ attempt: n })),
      ),
    }),
    weight: 1,
  },
);
const sequences = fc
  .tuple(fc.nat(9), fc.array(op, { maxLength: 30, size: 'max' }))
  .map(([n, ops]) => (n > 0 ? [{ op: 'create' as const }, ...ops] : ops));

/** What the transitions allow, as DESIGN.md and TaskRepository's contract say: the model the script is held to. */
type Model = { status: TaskStatus; attempts: number } | null;

function expected(model: Model, step: Op): { result: TransitionResult; next: Model } {
  const refuse = { result: { ok: false as const, status: model?.status ?? null }, next: model };
  const accept = (next: NonNullable<Model>) => ({ result: { ok: true as const, attempt: next.attempts }, next });
  if (step.op === 'create') {
    return model ? refuse : accept({ status: 'queued', attempts: 0 });
  }
  if (!model || ENDED.includes(model.status)) {
    return refuse;
  }
  switch (step.op) {
    case 'claim':
      return model.status === 'queued' ? accept({ status: 'assigned', attempts: model.attempts + 1 }) : refuse;
    case 'first':
      return model.status === 'assigned' && step.attempt === model.attempts
        ? accept({ status: 'streaming', attempts: model.attempts })
        : refuse;
    case 'requeue':
      return model.status === 'assigned' && step.attempt === model.attempts
        ? accept({ status: 'queued', attempts: model.attempts })
        : refuse;
    case 'end': {
      const allowed =
        step.guard === 'any' ||
        (step.guard === 'queued' ? model.status === 'queued' : step.guard.attempt === model.attempts);
      return allowed ? accept({ status: step.status, attempts: model.attempts }) : refuse;
    }
  }
}

/**
 * Random sequences of transitions through TaskRepository on the real Redis: each result is the
 * model's, a task never leaves a terminal state, its version and attempts only grow, a refused
 * transition changes nothing, and the record written behind to Postgres is the task's last state.
 */
describe('task transitions (property)', () => {
  let redis: Redis;
  let tasks: TaskRepository;
  let writer: RecordWriterFixture;
  let owners: TaskOwners;
  let devices: string[];
  const dispatcher = uniq('disp');

  beforeAll(async () => {
    redis = createRedis(REDIS_URL);
    // No Postgres fallback for endings: a transition of an unknown task is answered by Redis alone.
    tasks = new TaskRepository(redis, TASK_TTLS);
    writer = startRecordWriter();
    owners = await createTaskOwners('medium-property');
    devices = owners.deviceIds;
  });

  afterAll(async () => {
    await writer?.stop();
    redis?.disconnect();
    await closeDb();
  });

  const newTask = (): NewTask => newTaskOf(owners, { stream: false });

  const event = (type: string) => ['a', '1', 's', '1', 'e', JSON.stringify([{ type }])];

  function run(task: NewTask, step: Op): Promise<TransitionResult> {
    switch (step.op) {
      case 'create':
        return tasks.create(task);
      case 'claim':
        return tasks.claim(task.id, {
          deviceId: devices[step.device],
          modelDigest: null,
          dispatcherId: dispatcher,
          token: randomUUID(),
        });
      case 'first':
        return tasks.firstOutput(task.id, step.attempt, event('delta'));
      case 'requeue':
        return tasks.requeue(task.id, step.attempt, event('requeued'));
      case 'end':
        return tasks.end(task.id, { status: step.status, errorCode: 'x' }, step.guard, event('error'));
    }
  }

  it('never leaves a terminal state; versions and attempts only grow; a refused transition changes nothing', async () => {
    /** The last state of every task created, to compare with its record once all are written. */
    const last = new Map<string, TaskSnapshot>();
    await fc.assert(
      fc.asyncProperty(sequences, async (steps) => {
        const task = newTask();
        let state: Model = null;
        let before: TaskSnapshot | null = null;
        for (const [i, step] of steps.entries()) {
          const want = expected(state, step);
          const result = await run(task, step);
          const after = await tasks.get(task.id);
          const where = { step: i, op: step };
          expect({ ...where, result }).toEqual({ ...where, result: want.result });
          expect({ ...where, status: after?.status, attempts: after?.attempts }).toEqual({
            ...where,
            status: want.next?.status,
            attempts: want.next?.attempts,
          });
          if (before) {
            if (!result.ok || ENDED.includes(before.status)) {
              // Refused (an ended task refuses everything): not a field changed.
              expect({ ...where, after }).toEqual({ ...where, after: before });
            } else {
              expect({ ...where, grew: after!.version > before.version }).toEqual({ ...where, grew: true });
            }
            expect({ ...where, attempts: after!.attempts >= before.attempts }).toEqual({ ...where, attempts: true });
          }
          state = want.next;
          before = after;
        }
        if (before) {
          last.set(task.id, before);
        }
      }),
      { seed: SEED, numRuns: RUNS },
    );

    // Written behind, in any order and batched: each record is the task's last state all the same.
    await recordsWritten();
    const rows = await db().task.findMany({ where: { id: { in: [...last.keys()] } } });
    const recorded = new Map(rows.map((r) => [r.id, [r.status, r.attempts, r.recordVersion]]));
    expect(recorded).toEqual(new Map([...last].map(([id, s]) => [id, [s.status, s.attempts, s.version]])));
  });
});
