import fc from 'fast-check';
import type { Redis } from 'ioredis';
import { FairShare, createRedis } from '@app/common';
import { REDIS_URL } from '../../support/stack';
import { TestQueue } from './test-queue';

/** Fixed, so that CI runs the same cases every time (a failure prints the seed and the shrunk case). */
const SEED = 0x5eed_fa1e;
const RUNS = 40;

/**
 * Fair share converges to the weights: random organizations (2–5), weights (1–10) and backlogs
 * (30–90 jobs each), served by picks and takes as devices do. Over the takes during which every line
 * still had jobs, each line's count stays within `tolerance` takes of its weight's share of them.
 * Start-time fair queueing keeps every line's pass within one of its strides of the lowest pass, so a
 * line's count is off its share by less than one take per other line; and strides are whole numbers
 * (1000 / weight, rounded: off by at most 0.4 % for weights up to 10, so 1 % of the takes is room to
 * spare). Turns in rotation, ignoring the weights, are off by dozens of takes in most generated cases.
 */
const tolerance = (lines: number, takes: number) => lines - 1 + takes / 100;

describe('fair share converges to the weights (property)', () => {
  let redis: Redis;
  let fair: FairShare;

  beforeAll(() => {
    redis = createRedis(REDIS_URL);
    fair = new FairShare(redis);
  });

  afterAll(() => redis.disconnect());

  const lines = fc
    .array(fc.record({ weight: fc.integer({ min: 1, max: 10 }), jobs: fc.integer({ min: 30, max: 90 }) }), {
      minLength: 2,
      maxLength: 5,
    })
    .map((specs) => specs.map((spec, i) => ({ ...spec, org: `o${i}` })));

  it('over the takes while every line is backlogged, each line gets weight / sum of them', async () => {
    await fc.assert(
      fc.asyncProperty(lines, async (specs) => {
        const q = new TestQueue(redis, fair);
        try {
          for (const { org, weight, jobs } of specs) {
            await q.backlog(org, weight, jobs);
          }
          const left = new Map(specs.map((s) => [s.org, s.jobs]));
          const taken = new Map(specs.map((s) => [s.org, 0]));
          let takes = 0;
          // Until the first line runs out: up to then, every line had a job at every pick.
          while ([...left.values()].every((n) => n > 0)) {
            const org = (await q.next())?.org ?? null;
            expect(org).not.toBeNull();
            left.set(org!, left.get(org!)! - 1);
            taken.set(org!, taken.get(org!)! + 1);
            takes++;
          }
          const sum = specs.reduce((n, s) => n + s.weight, 0);
          const shares = specs.map((s) => ({
            org: s.org,
            weight: s.weight,
            taken: taken.get(s.org)!,
            expected: Math.round(((takes * s.weight) / sum) * 10) / 10,
          }));
          // The lines off by more than the tolerance, with what each got and should have (none).
          const within = tolerance(specs.length, takes);
          expect({ takes, off: shares.filter((s) => Math.abs(s.taken - (takes * s.weight) / sum) > within) }).toEqual({
            takes,
            off: [],
          });
        } finally {
          await q.close();
        }
      }),
      { seed: SEED, numRuns: RUNS },
    );
  });
});
