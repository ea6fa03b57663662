/** [start, end) in UTC. */
export type Span = readonly [Date, Date];

const HOUR_MS = 3_600_000;
const DAY_MS = 86_400_000;
const floorTo = (d: Date, unit: number) => new Date(Math.floor(d.getTime() / unit) * unit);
const ceilTo = (d: Date, unit: number) => new Date(Math.ceil(d.getTime() / unit) * unit);
const nonEmpty = (span: Span) => span[0].getTime() < span[1].getTime();

/**
 * Where each part of a usage range is read from. The rollups hold whole UTC hours (and days) of ended
 * tasks; what lies outside them is read from the tasks themselves:
 *
 * - `raw`: the partial hours at either end (every task in them);
 * - `hours`: the whole hours, for the counts (rollup + its pending deltas; tasks still in flight in
 *   them come from the tasks table);
 * - `latencyDays` / `latencyHours`: the whole days and the remaining whole hours for the latency
 *   histograms (days need far fewer rows; a query grouped by hour reads hours only).
 *
 * `rawOnly` reads everything from the tasks table: the reference the rollups must agree with.
 */
export interface UsagePlan {
  raw: Span[];
  hours: Span | null;
  latencyHours: Span[];
  latencyDays: Span | null;
}

export function planUsage(from: Date, to: Date, byHour: boolean, rawOnly = false): UsagePlan {
  const h1 = ceilTo(from, HOUR_MS);
  const h2 = floorTo(to, HOUR_MS);
  if (rawOnly || h1.getTime() >= h2.getTime()) {
    return { raw: [[from, to] as const].filter(nonEmpty), hours: null, latencyHours: [], latencyDays: null };
  }
  const raw = (
    [
      [from, h1],
      [h2, to],
    ] as const
  ).filter(nonEmpty);
  const d1 = ceilTo(h1, DAY_MS);
  const d2 = floorTo(h2, DAY_MS);
  if (byHour || d1.getTime() >= d2.getTime()) {
    return { raw, hours: [h1, h2], latencyHours: [[h1, h2]], latencyDays: null };
  }
  return {
    raw,
    hours: [h1, h2],
    latencyHours: (
      [
        [h1, d1],
        [d2, h2],
      ] as const
    ).filter(nonEmpty),
    latencyDays: [d1, d2],
  };
}
