import type { Agent } from 'node:http';
import { performance } from 'node:perf_hooks';
import { postJson } from './client';
import { openLoop } from './load';
import type { OpenLoopResult } from './load';

/** Idle sim devices with zero generation time: a reply of SIM_TOKENS tokens, at once (throughput's fleet). */
export const SIM_TOKENS = 4;
export const ZERO_TIME_SIM_ARGS = [
  '--sim-ttft-ms',
  '0',
  '--sim-tokens-per-second',
  '0',
  '--sim-tokens',
  String(SIM_TOKENS),
];

/** One window of non-streamed completions, as the throughput scenario offers them. */
export interface CompletionWindow extends OpenLoopResult {
  completed: number;
  errors: number;
  firstError?: string;
  /** Per request, ms from when it was due to its whole answer; the unanswered ones with their wait so far. */
  latencies: number[];
}

/**
 * `rate` requests/s to `url` for `durationMs`, open loop, each answer read whole; latency from the
 * moment each request was due (the throughput scenario's step). Requests still unanswered after the
 * drain count with their wait so far, so that a window cannot look better by leaving its slowest out.
 */
export async function completionWindow(
  url: URL,
  headers: Record<string, string>,
  body: string,
  agent: Agent,
  rate: number,
  durationMs: number,
): Promise<CompletionWindow> {
  const latencies: number[] = [];
  let completed = 0;
  let errors = 0;
  let firstError: string | undefined;
  let closed = false;
  const result = await openLoop({
    rate,
    durationMs,
    maxInFlight: 5_000,
    fire: async (dueAt) => {
      const r = await postJson(url, headers, body, agent);
      if (closed) {
        // Answered after the window ended: already counted as unfinished.
        return;
      }
      if (r.status === 200) {
        completed++;
        latencies.push(r.endAt - dueAt);
      } else {
        errors++;
        firstError ??= r.error ?? `HTTP ${r.status}: ${r.body.slice(0, 200)}`;
      }
    },
  });
  closed = true;
  const now = performance.now();
  latencies.push(...result.unfinished.map((due) => now - due));
  return { ...result, latencies, completed, errors, firstError };
}
