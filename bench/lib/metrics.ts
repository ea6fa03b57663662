/** What a process's own /metrics (prom-client's default metrics) says about its event loop and heap. */
export interface ProcessMetrics {
  /** Event-loop delay since the previous scrape (prom-client resets its histogram at each one), ms. */
  lagP50: number;
  lagP99: number;
  lagMax: number;
  /** V8 heap in use, bytes. */
  heapUsed: number;
}

/** The event-loop delay and heap a /metrics endpoint reports (prom-client's defaults), if the process has one. */
export async function scrape(base: string): Promise<ProcessMetrics | null> {
  try {
    const res = await fetch(`${base}/metrics`);
    if (!res.ok) {
      await res.arrayBuffer();
      return null;
    }
    const text = await res.text();
    const value = (name: string) => {
      const match = new RegExp(`^(?:\\w+_)?${name}(?:\\{[^}]*\\})? ([0-9.eE+-]+)$`, 'm').exec(text);
      return match ? Number(match[1]) : Number.NaN;
    };
    const lagP99 = value('nodejs_eventloop_lag_p99_seconds');
    if (!Number.isFinite(lagP99)) {
      return null;
    }
    return {
      lagP50: value('nodejs_eventloop_lag_p50_seconds') * 1000,
      lagP99: lagP99 * 1000,
      lagMax: value('nodejs_eventloop_lag_max_seconds') * 1000,
      heapUsed: value('nodejs_heap_size_used_bytes'),
    };
  } catch {
    return null;
  }
}
