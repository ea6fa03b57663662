import assert from 'node:assert/strict';
import { median, percentile, round, sortNumbers, summarize } from './stats';

describe('bench stats', () => {
  it('interpolates percentiles between the closest ranks', () => {
    const values = [10, 20, 30, 40, 50];
    assert.equal(percentile(values, 0), 10);
    assert.equal(percentile(values, 50), 30);
    assert.equal(percentile(values, 100), 50);
    assert.equal(percentile(values, 90), 46);
    assert.equal(percentile([7], 99), 7);
    assert.ok(Number.isNaN(percentile([], 50)));
  });

  it('sorts numerically, not as strings', () => {
    expect(sortNumbers([10, 9, 100, 1.5])).toEqual([1.5, 9, 10, 100]);
    assert.equal(median([3, 1, 2, 100]), 2.5);
  });

  it('summarizes a distribution and rounds it for the results file', () => {
    const summary = summarize([5, 1, 4, 2, 3]);
    assert.equal(summary.n, 5);
    assert.equal(summary.min, 1);
    assert.equal(summary.max, 5);
    assert.equal(summary.p50, 3);
    assert.equal(summary.mean, 3);
    assert.equal(round(3.14159), 3.14);
    assert.equal(round(123.456), 123.5);
    assert.equal(round(12345.6), 12346);
    assert.equal(round(Number.NaN), null);
  });
});
