/** Percentiles and summaries of latency samples (milliseconds), and the arithmetic of comparing two runs. */

/** The p-th percentile (0–100) of sorted values, by linear interpolation between the closest ranks. */
export function percentileSorted(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) {
    return Number.NaN;
  }
  if (sorted.length === 1) {
    return sorted[0];
  }
  const rank = (Math.min(100, Math.max(0, p)) / 100) * (sorted.length - 1);
  const low = Math.floor(rank);
  const high = Math.ceil(rank);
  return sorted[low] + (sorted[high] - sorted[low]) * (rank - low);
}

/** Sorted ascending as numbers (a Float64Array sorts numerically, and fast). */
export function sortNumbers(values: Iterable<number>): number[] {
  return Array.from(Float64Array.from(values).sort());
}

export function percentile(values: readonly number[], p: number): number {
  return percentileSorted(sortNumbers(values), p);
}

export function median(values: readonly number[]): number {
  return percentile(values, 50);
}

export function mean(values: readonly number[]): number {
  if (values.length === 0) {
    return Number.NaN;
  }
  let sum = 0;
  for (const v of values) {
    sum += v;
  }
  return sum / values.length;
}

/** What a table needs of a distribution; NaN where there were no samples. */
export interface Summary {
  n: number;
  min: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  mean: number;
}

export function summarize(values: readonly number[]): Summary {
  const sorted = sortNumbers(values);
  return {
    n: sorted.length,
    min: sorted.length ? sorted[0] : Number.NaN,
    p50: percentileSorted(sorted, 50),
    p90: percentileSorted(sorted, 90),
    p99: percentileSorted(sorted, 99),
    max: sorted.length ? sorted[sorted.length - 1] : Number.NaN,
    mean: mean(sorted),
  };
}

/** Rounds for a JSON report: 2 decimals below 10, 1 below 1000, whole above; NaN becomes null. */
export function round(value: number): number | null {
  if (!Number.isFinite(value)) {
    return null;
  }
  const abs = Math.abs(value);
  const digits = abs < 10 ? 100 : abs < 1000 ? 10 : 1;
  return Math.round(value * digits) / digits;
}

/** A summary with rounded numbers, for the results file. */
export function rounded(summary: Summary): Record<keyof Summary, number | null> {
  return {
    n: summary.n,
    min: round(summary.min),
    p50: round(summary.p50),
    p90: round(summary.p90),
    p99: round(summary.p99),
    max: round(summary.max),
    mean: round(summary.mean),
  };
}
