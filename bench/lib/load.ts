import { performance } from 'node:perf_hooks';
import { sleep } from './stack';

/**
 * Open-loop load: requests start on a fixed schedule whatever the answers do, and each latency counts
 * from the moment its request was due, so a stalled server cannot hide its stall by slowing the
 * client down (coordinated omission).
 */
export interface OpenLoopResult {
  /** Requests started. */
  started: number;
  /** Requests not started because maxInFlight were already waiting. */
  skipped: number;
  /** Wall time from the first due request to the last answer (or to the end of the drain). */
  elapsedMs: number;
  /** When each request still unanswered at the end of the drain was due (performance.now() time). */
  unfinished: number[];
}

/** The scheduler wakes this often and starts every request due by then. */
const TICK_MS = 2;
/** How long to wait for the last answers after the schedule ends; later ones count as unfinished. */
const DRAIN_MS = 10_000;

export async function openLoop(opts: {
  rate: number;
  durationMs: number;
  maxInFlight: number;
  /** Starts one request due at `dueAt` (performance.now() time); resolves when it has its answer. */
  fire(dueAt: number): Promise<void>;
  /** How long to wait for the last answers after the schedule ends. */
  drainMs?: number;
}): Promise<OpenLoopResult> {
  const interval = 1000 / opts.rate;
  const total = Math.max(1, Math.round((opts.durationMs / 1000) * opts.rate));
  const start = performance.now();
  const pending = new Map<Promise<void>, number>();
  let issued = 0;
  let skipped = 0;
  while (issued + skipped < total) {
    const now = performance.now();
    while (issued + skipped < total && start + (issued + skipped) * interval <= now) {
      const dueAt = start + (issued + skipped) * interval;
      if (pending.size >= opts.maxInFlight) {
        skipped++;
        continue;
      }
      issued++;
      const p = opts.fire(dueAt).finally(() => pending.delete(p));
      pending.set(p, dueAt);
    }
    await sleep(TICK_MS);
  }
  const drained = Promise.all(pending.keys());
  await Promise.race([drained, sleep(opts.drainMs ?? DRAIN_MS)]);
  return { started: issued, skipped, elapsedMs: performance.now() - start, unfinished: [...pending.values()] };
}

/** Closed-loop load: `concurrency` workers, each starting its next request when the last one ended. */
export async function closedLoop(opts: {
  concurrency: number;
  durationMs: number;
  run(worker: number): Promise<void>;
}): Promise<{ elapsedMs: number }> {
  const start = performance.now();
  const deadline = start + opts.durationMs;
  await Promise.all(
    Array.from({ length: opts.concurrency }, async (_, worker) => {
      // Staggered starts, so that the workers do not stay in lockstep.
      await sleep((worker * 7) % 50);
      while (performance.now() < deadline) {
        await opts.run(worker);
      }
    }),
  );
  return { elapsedMs: performance.now() - start };
}
