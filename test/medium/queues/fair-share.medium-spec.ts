import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { FairShare, PICK_TRIES, PICK_WINDOW, createRedis } from '@app/common';
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
  const connections: Redis[] = [];

  beforeAll(() => {
    redis = createRedis(REDIS_URL);
    fair = new FairShare(redis);
  });

  afterAll(async () => {
    for (const q of queues) {
      await q.close();
    }
    connections.forEach((c) => c.disconnect());
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

  describe('the lines a pick is passed (PICK): those its dispatcher’s last pick of the queue saw', () => {
    /** A dispatcher that remembers no lines: every pick of its learns them first. */
    const fresh = () => new FairShare(redis);

    /**
     * A dispatcher on a connection of its own, whose calls of the pick script are counted (its round
     * trips); `before` runs ahead of each, as another process's write between two round trips.
     */
    function counted(before?: () => Promise<unknown>): { fair: FairShare; calls: () => number } {
      const connection = createRedis(REDIS_URL);
      connections.push(connection);
      const counting = new FairShare(connection);
      const script = connection as unknown as { syFairPick: (...args: unknown[]) => Promise<unknown> };
      const pick = script.syFairPick.bind(connection);
      let calls = 0;
      script.syFairPick = async (...args) => {
        await before?.();
        calls++;
        return pick(...args);
      };
      return { fair: counting, calls: () => calls };
    }

    it('a line that came and another that left since its last pick: the answers a fresh pick gives', async () => {
      const q = testQueue();
      const twin = testQueue();
      const other = fresh();
      for (const t of [q, twin]) {
        await t.add('b', 1, 2);
        await t.add('c', 1, 2);
        await t.add('d', 1);
      }
      // The last pick saw b, c and d.
      expect(await q.serve(1)).toEqual(['b']);
      expect(await twin.serve(1, fresh)).toEqual(['b']);
      for (const t of [q, twin]) {
        // Another dispatcher takes d's only job (d leaves), then a comes, at the virtual time.
        expect((await t.takeFrom('d', other)).backlog).toBe(true);
        await t.add('a', 1);
      }
      const expected = ['a', 'c', 'b', 'c', null];
      expect(await q.serve(5)).toEqual(expected);
      expect(await twin.serve(5, fresh)).toEqual(expected);
      expect(await q.backlogged()).toBe(false);
    });

    it('costs one round trip while the lines it saw stay the lowest, and one more when a line came', async () => {
      const q = testQueue();
      const { fair: mine, calls } = counted();
      await q.add('a', 1, 3);
      await q.add('b', 1, 3);
      // Its first pick of the queue learns the lines, then picks.
      expect(await q.serve(1, () => mine)).toEqual(['a']);
      expect(calls()).toBe(2);
      expect(await q.serve(3, () => mine)).toEqual(['b', 'a', 'b']);
      expect(calls()).toBe(5);
      // c comes at the virtual time, ahead of a and b.
      await q.add('c', 1);
      expect(await q.serve(1, () => mine)).toEqual(['c']);
      expect(calls()).toBe(7);
      expect(await q.serve(3, () => mine)).toEqual(['a', 'b', null]);
      expect(calls()).toBe(10);
    });

    it('at a queue of more lines than a pick looks at, each pick tells the next which lines are the lowest now', async () => {
      const q = testQueue();
      const { fair: mine, calls } = counted();
      // Each pick moves its line behind the others, out of the lowest PICK_WINDOW, and lets the next in.
      const orgs = Array.from({ length: PICK_WINDOW + 1 }, (_, i) => `o${String(i).padStart(2, '0')}`);
      for (const org of orgs) {
        await q.backlog(org, 1, 2);
      }
      expect(await q.serve(orgs.length + 1, () => mine)).toEqual([...orgs, orgs[0]]);
      // One more for its first pick of the queue, which learned the lines.
      expect(calls()).toBe(orgs.length + 2);
    });

    it('passes over lines whose jobs went away, whether or not a line came since its last pick', async () => {
      const q = testQueue();
      await q.add('a', 1);
      const [b] = await q.add('b', 1);
      await q.add('c', 1);
      const [d] = await q.add('d', 1);
      expect(await q.serve(1)).toEqual(['a']);
      // The lines it saw are the lowest still; b has nothing.
      await q.remove('b', b);
      expect(await q.serve(1)).toEqual(['c']);
      // e comes, unknown to the last pick, behind d, which has nothing.
      await q.remove('d', d);
      await q.add('e', 1);
      expect(await q.serve(2)).toEqual(['e', null]);
      expect(await q.backlogged()).toBe(false);
    });

    it('dispatchers taking turns at a queue of more lines than a pick looks at: the order fresh picks give', async () => {
      const q = testQueue();
      const twin = testQueue();
      // Each pick moves a line out of the lowest PICK_WINDOW and another in: what each dispatcher saw is
      // stale after the other's pick.
      const orgs = Array.from({ length: PICK_WINDOW + 8 }, (_, i) => `o${String(i).padStart(2, '0')}`);
      for (const t of [q, twin]) {
        for (const [i, org] of orgs.entries()) {
          await t.backlog(org, 1 + (i % 3), 3);
        }
      }
      const dispatchers = [fair, fresh()];
      const takes = orgs.length * 3;
      const served = await q.serve(takes, (i) => dispatchers[i % 2]);
      expect(served.filter((org) => org === null)).toEqual([]);
      expect(served).toEqual(await twin.serve(takes, fresh));
    });

    it('under churn faster than its round trips, gives up after PICK_TRIES calls having changed nothing', async () => {
      const q = testQueue();
      await q.add('a', 1);
      // A line comes before each call: every answer is stale by the next call.
      let n = 0;
      const { fair: churned, calls } = counted(() => q.add(`n${++n}`, 1));
      expect(await q.next(churned)).toBeNull();
      expect(calls()).toBe(PICK_TRIES);
      // The sweep comes back to the queue.
      expect(await q.backlogged()).toBe(true);
      // Nothing was charged: all at the virtual time, a first by its name.
      const lines = Array.from({ length: PICK_TRIES }, (_, i) => `n${i + 1}`);
      expect(await q.serve(PICK_TRIES + 2)).toEqual(['a', ...lines, null]);
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
