/** A Prometheus histogram's cumulative bucket counts, by upper bound in seconds. */
export type Buckets = Map<number, number>;

/** The buckets of histogram `name` from a process's /metrics, or null when it has none. */
export async function scrapeHistogram(base: string, name: string): Promise<Buckets | null> {
  try {
    const res = await fetch(`${base}/metrics`);
    const text = await res.text();
    const buckets: Buckets = new Map();
    const pattern = new RegExp(`^${name}_bucket\\{[^}]*le="([^"]+)"[^}]*\\} ([0-9.eE+-]+)$`, 'gm');
    for (const match of text.matchAll(pattern)) {
      buckets.set(match[1] === '+Inf' ? Infinity : Number(match[1]), Number(match[2]));
    }
    return buckets.size > 0 ? buckets : null;
  } catch {
    return null;
  }
}

/**
 * The bucket bound (ms) under which fraction `q` of the observations between two scrapes fell: a
 * quantile no finer than the buckets.
 */
export function bucketQuantileMs(before: Buckets | null, after: Buckets | null, q: number): number | null {
  if (!before || !after) {
    return null;
  }
  const bounds = [...after.keys()].sort((a, b) => a - b);
  const total = (after.get(Infinity) ?? 0) - (before.get(Infinity) ?? 0);
  if (total <= 0) {
    return null;
  }
  for (const bound of bounds) {
    if ((after.get(bound) ?? 0) - (before.get(bound) ?? 0) >= q * total) {
      return bound * 1000;
    }
  }
  return Infinity;
}
