import { median, percentile, round, sortNumbers, summarize } from './stats';

describe('bench stats', () => {
  it('interpolates percentiles between the closest ranks', () => {
    const values = [10, 20, 30, 40, 50];
    expect(percentile(values, 0)).toBe(10);
    expect(percentile(values, 50)).toBe(30);
    expect(percentile(values, 100)).toBe(50);
    expect(percentile(values, 90)).toBe(46);
    expect(percentile([7], 99)).toBe(7);
    expect(percentile([], 50)).toBeNaN();
  });

  it('sorts numerically, not as strings', () => {
    expect(sortNumbers([10, 9, 100, 1.5])).toEqual([1.5, 9, 10, 100]);
    expect(median([3, 1, 2, 100])).toBe(2.5);
  });

  it('summarizes a distribution and rounds it for the results file', () => {
    const summary = summarize([5, 1, 4, 2, 3]);
    expect(summary.n).toBe(5);
    expect(summary.min).toBe(1);
    expect(summary.max).toBe(5);
    expect(summary.p50).toBe(3);
    expect(summary.mean).toBe(3);
    expect(round(3.14159)).toBe(3.14);
    expect(round(123.456)).toBe(123.5);
    expect(round(12345.6)).toBe(12346);
    expect(round(Number.NaN)).toBeNull();
  });
});
