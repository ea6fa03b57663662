import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { FairShare, createRedis } from '@app/common';
import { REDIS_URL } from '../../support/stack';
import { TestQueue } from './test-queue';

/**
 * The fair-share scripts (ENQUEUE, PICK, CHARGE, REFUND, POSITION) on the real Redis, at their edges,
 * through FairShare and BullMQ lines only: which organization a device is given next is what each
 * test asserts, never the scripts' keys. Each expected order follows from start-time fair queueing
 * (see fair-share.ts): a line's pass grows by its stride (1000 / weight) at each of its turns.
 */
describe('fair share', () => {
  let redis: Redis;
  let fair: FairShare;
  const queues: TestQueue[] = [];

  beforeAll(() => {
    redis = createRedis(REDIS_URL);
    fair = new FairShare(redis);
  });

  afterAll(async () => {
    for (const q of queues) {
      await q.close();
    }
    redis.disconnect();
  });

  function testQueue(): TestQueue {
    const q = new TestQueue(redis, fair);
    queues.push(q);
    return q;
  }

  describe('picks (ENQUEUE, PICK)', () => {
    it('over a standing backlog, lines are served in proportion to their weights, and a new weight counts from the next turn', async () => {
      const q = testQueue();
      await q.add('a', 3, 8);
      await q.add('b', 1, 8);
      // Strides 333 and 1000: a three turns to b's one.
      const first = await q.serve(8);
      expect(first).toEqual(['a', 'b', 'a', 'a', 'a', 'b', 'a', 'a']);
      // b's next job comes at weight 3: from now on the two alternate.
      await q.add('b', 3);
      await q.add('a', 3, 4);
      expect(await q.serve(4)).toEqual(['a', 'b', 'a', 'b']);
    });

    it('an empty queue: the pick finds nothing and the queue leaves the backlog', async () => {
      const q = testQueue();
      expect(await q.backlogged()).toBe(false);
      await q.add('a', 1);
      expect(await q.backlogged()).toBe(true);
      expect(await q.serve(2)).toEqual(['a', null]);
      expect(await q.backlogged()).toBe(false);
      expect(await fair.depth(q.queue)).toBe(0);
    });

    it('a line whose jobs went away without a take (their clients left) is passed over and dropped', async () => {
      const q = testQueue();
      const [gone] = await q.add('a', 1);
      await q.add('b', 1);
      await q.remove('a', gone);
      // a comes first by name at equal passes, but has nothing.
      expect(await q.serve(2)).toEqual(['b', null]);
      expect(await q.backlogged()).toBe(false);
    });

    it('a pick that clears stale lines before finding a job never drops the queue from the backlog', async () => {
      const q = testQueue();
      // More stale lines than one pick looks at, all before the line with a job (same pass, earlier names).
      const stale = Array.from({ length: 40 }, (_, i) => `s${String(i).padStart(2, '0')}`);
      const jobs = new Map<string, string>();
      for (const org of stale) {
        jobs.set(org, (await q.add(org, 1))[0]);
      }
      await q.add('z', 1);
      for (const org of stale) {
        await q.remove(org, jobs.get(org)!);
      }
      const found: (string | null)[] = [];
      for (let i = 0; i < 3 && found.at(-1) !== 'z'; i++) {
        found.push((await q.next())?.org ?? null);
        if (found.at(-1) === null) {
          // The sweep comes back to it.
          expect(await q.backlogged()).toBe(true);
        }
      }
      expect(found.at(-1)).toBe('z');
      expect(await q.serve(1)).toEqual([null]);
    });
  });

  describe('a line back from idle (ENQUEUE)', () => {
    it('starts at the queue’s virtual time: no credit for the time it was away', async () => {
      const q = testQueue();
      await q.add('a', 1, 6);
      await q.add('b', 1, 1);
      // b's one job, then a alone (b is dropped when a pick finds its line empty).
      expect(await q.serve(6)).toEqual(['a', 'b', 'a', 'a', 'a', 'a']);
      // b comes back with three jobs: one turn each, not the four a took while it was away.
      await q.add('b', 1, 3);
      expect(await q.serve(4)).toEqual(['b', 'a', 'b', 'b']);
    });

    it('that used more than its share before it went idle starts at its own pass: no fresh start', async () => {
      const q = testQueue();
      await q.add('b', 1, 3);
      expect(await q.serve(4)).toEqual(['b', 'b', 'b', null]);
      expect(await q.backlogged()).toBe(false);
      // a comes at the virtual time; b, a turn ahead of it, waits for a to catch up.
      await q.add('a', 1, 4);
      await q.add('b', 1, 4);
      expect(await q.serve(5)).toEqual(['a', 'a', 'b', 'a', 'b']);
    });
  });

  describe('a take without a pick (CHARGE)', () => {
    it("uses the line's turn", async () => {
      const q = testQueue();
      await q.add('a', 1, 2);
      await q.add('b', 1, 2);
      expect((await q.takeFrom('a')).backlog).toBe(true);
      expect(await q.serve(2)).toEqual(['b', 'a']);
    });

    it('reports a backlog while any line of the queue has jobs waiting, and none once the last is taken', async () => {
      const q = testQueue();
      await q.add('a', 1, 2);
      await q.add('b', 1, 1);
      expect((await q.takeFrom('a')).backlog).toBe(true);
      // Org A's line is empty now, org B's is not.
      expect((await q.takeFrom('a')).backlog).toBe(true);
      expect(await q.backlogged()).toBe(true);
      expect((await q.takeFrom('b')).backlog).toBe(false);
      expect(await q.backlogged()).toBe(false);
      expect(await q.serve(1)).toEqual([null]);
    });

    it('a line enqueued before the charge runs counts', async () => {
      const q = testQueue();
      await q.add('a', 1);
      expect(await q.take('a')).toBeDefined();
      await q.add('b', 1);
      expect(await fair.charge(q.line('a'))).toBe(true);
      expect(await q.serve(1)).toEqual(['b']);
    });

    it("taking a line's last job: the line goes idle having used its turn", async () => {
      const q = testQueue();
      await q.add('a', 1);
      expect((await q.takeFrom('a')).backlog).toBe(false);
      expect(await q.backlogged()).toBe(false);
      // a comes back a turn behind b, though its name comes first.
      await q.add('a', 1);
      await q.add('b', 1);
      expect(await q.serve(3)).toEqual(['b', 'a', null]);
    });

    it('a charge for a line that has no turn changes no turn, and says whether other lines wait', async () => {
      const q = testQueue();
      expect(await fair.charge(q.line('c'))).toBe(false);
      await q.add('a', 1);
      await q.add('b', 1);
      expect(await fair.charge(q.line('c'))).toBe(true);
      expect(await q.serve(3)).toEqual(['a', 'b', null]);
    });
  });

  describe('a job put back (REFUND)', () => {
    it('its line gets back the turn its take used, and the job is its line’s next', async () => {
      const q = testQueue();
      const [a1] = await q.add('a', 1, 2);
      await q.add('b', 1, 2);
      const taken = (await q.next())!;
      expect([taken.org, taken.job.id]).toEqual(['a', a1]);
      await q.putBack(taken);
      expect(await fair.position(q.line('a'), a1)).toBe(1);
      const again = (await q.next())!;
      expect([again.org, again.job.id]).toEqual(['a', a1]);
      expect(await q.serve(3)).toEqual(['b', 'a', 'b']);
    });

    it('never moves its line before the queue’s virtual time, however many jobs come back', async () => {
      const q = testQueue();
      await q.add('a', 1, 3);
      await q.add('b', 1, 3);
      const taken = [];
      for (let i = 0; i < 4; i++) {
        taken.push((await q.next())!);
      }
      expect(taken.map((t) => t.org)).toEqual(['a', 'b', 'a', 'b']);
      // Both of b's jobs come back: b is at the virtual time again, one turn early, not two.
      await q.putBack(taken[3]);
      await q.putBack(taken[1]);
      expect(await q.serve(3)).toEqual(['b', 'a', 'b']);
    });

    it('after its line went idle: the line is back at the virtual time and the queue backlogged again', async () => {
      const q = testQueue();
      await q.add('a', 1);
      const taken = await q.takeFrom('a');
      expect(taken.backlog).toBe(false);
      expect(await q.backlogged()).toBe(false);
      await q.putBack(taken);
      expect(await q.backlogged()).toBe(true);
      const again = (await q.next())!;
      expect([again.org, again.job.id]).toEqual(['a', taken.job.id]);
    });
  });

  describe('where a waiting job stands (POSITION)', () => {
    it("counts only its own organization's jobs, whatever the other lines hold or are given", async () => {
      const q = testQueue();
      const a = await q.add('a', 1, 3);
      const b = await q.add('b', 1, 5);
      expect(await Promise.all(a.map((id) => fair.position(q.line('a'), id)))).toEqual([1, 2, 3]);
      expect(await fair.position(q.line('b'), b[4])).toBe(5);
      // A job is found only in its own line.
      expect(await fair.position(q.line('a'), b[0])).toBeNull();
      expect(await fair.depth(q.queue)).toBe(8);

      // b is given a job, and gets more: a's places do not move.
      expect((await q.takeFrom('b')).job.id).toBe(b[0]);
      await q.add('b', 1, 4);
      expect(await Promise.all(a.map((id) => fair.position(q.line('a'), id)))).toEqual([1, 2, 3]);
      expect(await fair.position(q.line('b'), b[4])).toBe(4);

      // a's first is taken: it no longer waits, and the others move up.
      const taken = await q.takeFrom('a');
      expect(taken.job.id).toBe(a[0]);
      expect(await Promise.all(a.map((id) => fair.position(q.line('a'), id)))).toEqual([null, 1, 2]);
      expect(await fair.depth(q.queue)).toBe(10);
      // Put back, it is its line's next again.
      await q.putBack(taken);
      expect(await Promise.all(a.map((id) => fair.position(q.line('a'), id)))).toEqual([1, 2, 3]);
      expect(await fair.position(q.line('a'), randomUUID())).toBeNull();
    });
  });
});
