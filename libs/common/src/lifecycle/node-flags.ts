/**
 * The V8 flags the dispatcher runs with. Every launcher passes them on node's command line: the npm
 * script `start:dispatcher`, the demo, the end-to-end tests and the bench. The young generation's
 * size is fixed when the heap is created, so it cannot be set from inside the process.
 *
 * With 10,000 devices, the dispatcher's heap holds about 140 MB of socket.io, engine.io and ws objects
 * that live as long as their connections. Each ping and each task replaces a few of those objects,
 * so about 3.7 MB a second survive the young generation at 200 requests/s, and about 1 MB a second
 * when idle. V8 by default grows the old generation only 10–20 % past what is live. That meant a
 * mark-compact every 4–8 s under load. Each one marked the whole heap, on two cores the rest of the
 * machine was using too, and slowed the assignments of the next 150 ms by up to 110 ms.
 * - `--heap-growing-percent=50`: the old generation grows to 1.5× what is live before it is marked
 *   again, so a mark-compact comes every 15–20 s under that load.
 * - `--max-semi-space-size=4` (MB, default 16): a scavenge copies what is alive at that moment, so a
 *   smaller young generation means shorter pauses, more often: mostly 1.5–5 ms every 100 ms, instead of
 *   5–27 ms every 400 ms.
 *
 * Measured in docs/benchmarks.md (the 2026-12-04 section on the garbage collector): over 40 s of
 * 200 requests/s to 10,000 devices, enqueue→task:assign p99 went from 33–34 ms to 19–38 ms (median 27),
 * and peak RSS from 298–347 MB to 250–292 MB.
 */
export const DISPATCHER_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=4', '--heap-growing-percent=50'];

/** The dispatcher's entry point, relative to the build output (dist/). */
export const DISPATCHER_SCRIPT = 'apps/dispatcher/src/main.js';

/** The node flags for one of the project's entry points (relative to dist/): the dispatcher's, or none. */
export function nodeFlagsFor(script: string): string[] {
  return script === DISPATCHER_SCRIPT ? [...DISPATCHER_NODE_FLAGS] : [];
}

/** The dispatcher's flags this process was started without (empty when all are there). */
export function missingNodeFlags(execArgv: readonly string[] = process.execArgv): string[] {
  return DISPATCHER_NODE_FLAGS.filter((flag) => !execArgv.includes(flag));
}
