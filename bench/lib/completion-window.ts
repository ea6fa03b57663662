import type { Agent } from 'node:http';
import { performance } from 'node:perf_hooks';
import { postJson } from './client';
import { openLoop } from './load';
import type { OpenLoopResult } from './load';
import { rounded, summarize } from './stats';
import type { Summary } from './stats';

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

/**
 * A measured window of one leg of a scenario whose legs alternate (budgets, retention): its completions
 * and the CPU spent over it (and the settle after it).
 */
export interface MeasuredWindow {
  window: CompletionWindow;
  /** CPU ms per process group. */
  cpu: Record<string, number>;
  machineBusyMs: number;
  machineTotalMs: number;
}

/** A leg's windows taken together. */
export interface LegTotals {
  windows: number;
  started: number;
  completed: number;
  /** Errors, skipped and unfinished requests. */
  failed: number;
  firstError?: string;
  elapsedMs: number;
  completedPerS: number;
  latency: Summary;
  /** Per process group, and `other`: the rest of the machine. */
  cpuPerCompletion: Record<string, number>;
  machineBusy: number;
}

export function legTotals(own: readonly MeasuredWindow[]): LegTotals {
  const completed = own.reduce((a, w) => a + w.window.completed, 0);
  const per = (value: number) => (completed > 0 ? value / completed : Number.NaN);
  const cpu: Record<string, number> = {};
  for (const w of own) {
    for (const [name, ms] of Object.entries(w.cpu)) {
      cpu[name] = (cpu[name] ?? 0) + ms;
    }
  }
  const busy = own.reduce((a, w) => a + w.machineBusyMs, 0);
  const ours = Object.values(cpu).reduce((a, b) => a + b, 0);
  const cpuPerCompletion = Object.fromEntries(Object.entries(cpu).map(([name, ms]) => [name, per(ms)]));
  cpuPerCompletion.other = per(Math.max(0, busy - ours));
  const elapsedMs = own.reduce((a, w) => a + w.window.elapsedMs, 0);
  return {
    windows: own.length,
    started: own.reduce((a, w) => a + w.window.started, 0),
    completed,
    failed: own.reduce((a, w) => a + failedIn(w.window), 0),
    firstError: own.find((w) => w.window.firstError)?.window.firstError,
    elapsedMs,
    completedPerS: (completed * 1000) / elapsedMs,
    latency: summarize(own.flatMap((w) => w.window.latencies)),
    cpuPerCompletion,
    machineBusy: busy / own.reduce((a, w) => a + w.machineTotalMs, 0),
  };
}

/** A window's requests that did not complete: errors, skipped, unfinished. */
export function failedIn(w: CompletionWindow): number {
  return w.errors + w.skipped + w.unfinished.length;
}

/** A leg's totals as the results file keeps them. */
export function legTotalsData(leg: LegTotals) {
  return {
    windows: leg.windows,
    started: leg.started,
    completed: leg.completed,
    errors_skipped_unfinished: leg.failed,
    ...(leg.firstError ? { first_error: leg.firstError } : {}),
    completed_per_s: Math.round(leg.completedPerS * 10) / 10,
    latency_ms: rounded(leg.latency),
    cpu_ms_per_completion: Object.fromEntries(
      Object.entries(leg.cpuPerCompletion).map(([k, v]) => [k, Math.round(v * 1000) / 1000]),
    ),
    machine_busy: Math.round(leg.machineBusy * 1000) / 1000,
  };
}
