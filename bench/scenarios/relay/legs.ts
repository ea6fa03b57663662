import { randomUUID } from 'node:crypto';
import type http from 'node:http';
import { closedLoop } from '../../lib/load';
import { streamChat } from '../../lib/client';
import type { StreamResult } from '../../lib/client';
import { median, rounded, summarize } from '../../lib/stats';
import type { Summary } from '../../lib/stats';

/** The model of every leg: the upstream serves it, the devices announce it, the requests ask for it. */
export const MODEL = 'bench-relay';

/** What one leg (direct, floor chain or relay) measured at one concurrency. */
export interface Leg {
  requests: number;
  errors: number;
  firstError?: string;
  ttft: Summary;
  itl: Summary;
  /** Per stream: tokens after the first / time from first to last token. */
  decodeTps: number;
  /** Per stream: tokens / time from request to last token. */
  e2eTps: number;
  /** Tokens delivered per second over the whole step. */
  aggregateTps: number;
}

/** Where a leg's requests go: the same request every way, so that the legs differ only in the path. */
export interface LegTarget {
  url: URL;
  headers: Record<string, string>;
  /** Called with each request's marker and result (the relay leg keeps them to split its TTFT). */
  record?: (marker: string, result: StreamResult) => void;
}

/** A leg's requests and how long the closed loop ran. */
export interface LegRun {
  results: StreamResult[];
  elapsedMs: number;
}

/** The same request every way; the marker lets the upstream time each request it receives. */
function requestBody(marker: string, maxTokens: number): string {
  return JSON.stringify({
    model: MODEL,
    messages: [{ role: 'user', content: `Tell me something about relays. [bench:${marker}]` }],
    stream: true,
    stream_options: { include_usage: true },
    max_tokens: maxTokens,
  });
}

/** Streams requests to a leg in a closed loop: `concurrency` at a time for `durationMs`. */
export async function runLeg(
  leg: LegTarget,
  agent: http.Agent,
  maxTokens: number,
  concurrency: number,
  durationMs: number,
): Promise<LegRun> {
  const results: StreamResult[] = [];
  const { elapsedMs } = await closedLoop({
    concurrency,
    durationMs,
    run: async () => {
      const marker = randomUUID();
      const result = await streamChat(leg.url, leg.headers, requestBody(marker, maxTokens), agent).done;
      results.push(result);
      leg.record?.(marker, result);
    },
  });
  return { results, elapsedMs };
}

/** A leg's latencies and rates from its streams; a stream that did not complete with content is an error. */
export function measureLeg({ results, elapsedMs }: LegRun): Leg {
  const ok = results.filter((r) => r.complete && r.contentAt.length > 0);
  const ttft: number[] = [];
  const itl: number[] = [];
  const decode: number[] = [];
  const e2e: number[] = [];
  let tokens = 0;
  for (const r of ok) {
    const times = r.contentAt;
    tokens += times.length;
    ttft.push(times[0] - r.sentAt);
    for (let i = 1; i < times.length; i++) {
      itl.push(times[i] - times[i - 1]);
    }
    const last = times[times.length - 1];
    if (times.length > 1 && last > times[0]) {
      decode.push(((times.length - 1) * 1000) / (last - times[0]));
    }
    e2e.push((times.length * 1000) / (last - r.sentAt));
  }
  const failed = results.filter((r) => !(r.complete && r.contentAt.length > 0));
  return {
    requests: results.length,
    errors: failed.length,
    firstError: failed[0]?.error ?? (failed[0] ? `status ${failed[0].status}, incomplete` : undefined),
    ttft: summarize(ttft),
    itl: summarize(itl),
    decodeTps: median(decode),
    e2eTps: median(e2e),
    aggregateTps: (tokens * 1000) / elapsedMs,
  };
}

/** A leg as the results file keeps it. */
export function legJson(leg: Leg) {
  return {
    requests: leg.requests,
    errors: leg.errors,
    ...(leg.firstError ? { first_error: leg.firstError } : {}),
    ttft_ms: rounded(leg.ttft),
    itl_ms: rounded(leg.itl),
    decode_tokens_per_s_median: Math.round(leg.decodeTps * 10) / 10,
    e2e_tokens_per_s_median: Math.round(leg.e2eTps * 10) / 10,
    aggregate_tokens_per_s: Math.round(leg.aggregateTps),
  };
}
