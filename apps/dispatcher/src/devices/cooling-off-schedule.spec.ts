import { MAX_DOUBLINGS, coolingOffMs, coolingOffSchedule } from './cooling-off-schedule';

describe('cooling-off schedule', () => {
  it('doubles from the first cooling-off on each repeat, up to 64 times it', () => {
    expect(coolingOffSchedule(10_000)).toEqual([10_000, 20_000, 40_000, 80_000, 160_000, 320_000, 640_000]);
    expect(coolingOffSchedule(10_000).at(-1)).toBe(10_000 * 2 ** MAX_DOUBLINGS);
  });

  it('the nth disconnection waits the nth step; every later one the last', () => {
    expect([1, 2, 3].map((n) => coolingOffMs(n, 1_000))).toEqual([1_000, 2_000, 4_000]);
    expect(coolingOffMs(7, 1_000)).toBe(64_000);
    expect(coolingOffMs(1_000, 1_000)).toBe(64_000);
    // A count Redis lost (or never had) is a first offence.
    expect(coolingOffMs(0, 1_000)).toBe(1_000);
  });
});
