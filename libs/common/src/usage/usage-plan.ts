/** [start, end) in UTC. */
export type Span = readonly [Date, Date];

/** The periods the rollups keep (the usage_period enum). */
export type UsagePeriod = 'hour' | 'day' | 'month';

/** The lengths of the periods (a month's varies and is computed from the calendar). */
const HOUR_MS = 3_600_000;
const DAY_MS = 86_400_000;
const floorTo = (d: Date, unit: number) => new Date(Math.floor(d.getTime() / unit) * unit);
const ceilTo = (d: Date, unit: number) => new Date(Math.ceil(d.getTime() / unit) * unit);
const floorMonth = (d: Date) => new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1));
const ceilMonth = (d: Date) => {
  const floor = floorMonth(d);
  return floor.getTime() === d.getTime() ? floor : new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1));
};
const nonEmpty = (span: Span) => span[0].getTime() < span[1].getTime();
const before = (a: Date, b: Date) => a.getTime() < b.getTime();

/**
 * Where each part of a usage range is read from. The rollups hold ended tasks by whole UTC hours,
 * days and calendar months; a range is cut into the coarsest periods it contains (fewest rows to
 * read), down to what the grouping needs (by hour: hours only; by day: days and hours):
 *
 *   from ─raw─ h1 ─hours─ d1 ─days─ m1 ─months─ m2 ─days─ d2 ─hours─ h2 ─raw─ to
 *
 * - `raw`: the partial hours at either end (every task in them, from the tasks table);
 * - `rollup`: the spans per period, read from the rollups; their unfolded deltas and the tasks still
 *   in flight are read over `[h1, h2)` as a whole (`rolled`).
 *
 * `rawOnly` reads everything from the tasks table: the reference the rollups must agree with.
 */
export interface UsagePlan {
  raw: Span[];
  rolled: Span | null;
  rollup: { period: UsagePeriod; span: Span }[];
}

export function planUsage(from: Date, to: Date, finest: UsagePeriod, rawOnly = false): UsagePlan {
  const h1 = ceilTo(from, HOUR_MS);
  const h2 = floorTo(to, HOUR_MS);
  if (rawOnly || !before(h1, h2)) {
    return { raw: [[from, to] as Span].filter(nonEmpty), rolled: null, rollup: [] };
  }
  const raw = (
    [
      [from, h1],
      [h2, to],
    ] as Span[]
  ).filter(nonEmpty);
  const rollup: UsagePlan['rollup'] = [];
  const add = (period: UsagePeriod, span: Span) => {
    if (nonEmpty(span)) {
      rollup.push({ period, span });
    }
  };
  const d1 = ceilTo(h1, DAY_MS);
  const d2 = floorTo(h2, DAY_MS);
  if (finest === 'hour' || !before(d1, d2)) {
    add('hour', [h1, h2]);
    return { raw, rolled: [h1, h2], rollup };
  }
  add('hour', [h1, d1]);
  const m1 = ceilMonth(d1);
  const m2 = floorMonth(d2);
  if (finest === 'day' || !before(m1, m2)) {
    add('day', [d1, d2]);
  } else {
    add('day', [d1, m1]);
    add('month', [m1, m2]);
    add('day', [m2, d2]);
  }
  add('hour', [d2, h2]);
  return { raw, rolled: [h1, h2], rollup };
}
