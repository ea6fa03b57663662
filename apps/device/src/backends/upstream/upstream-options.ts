import { randomBytes } from 'node:crypto';
import type { Feature, TokenLogprob } from '@app/common/protocol/chat';
import type { UpstreamMonitor, ModelMapping } from './upstream-monitor';

/** What the ollama and openai backends are configured with (from the command line). */
export interface UpstreamOptions {
  /** The runtime's base URL: `http://127.0.0.1:11434` for Ollama, `http://127.0.0.1:8000/v1` for an OpenAI-compatible server. */
  upstream: string;
  /** Explicit --model mappings; empty = serve every model the runtime lists. */
  models: ModelMapping[];
  /** Sent as a bearer token to the runtime. */
  apiKey?: string;
  /** --features: declare exactly these instead of the backend's own set. */
  features?: Feature[];
  /** --web-search: the runtime (or a proxy in front of it) searches the web; declare web_search. */
  webSearch?: boolean;
  discoveryIntervalMs: number;
  healthIntervalMs: number;
}

export const UPSTREAM_DEFAULTS = {
  ollamaUrl: 'http://127.0.0.1:11434',
  // A model pulled or removed shows up within this (the issue asks for within a minute); reading a model list is cheap.
  discoveryIntervalMs: 15_000,
  // "Every few seconds": a runtime restart is noticed quickly, and an idle probe costs one small request.
  healthIntervalMs: 3_000,
} as const;

/** Opening a connection to a local runtime takes milliseconds; this long means nothing is there. */
export const CONNECT_TIMEOUT_MS = 5_000;
/** A health probe or model list that takes longer than this counts as no answer. */
export const PROBE_TIMEOUT_MS = 5_000;
/** The protocol carries at most 8 choices and 20 alternatives per token. */
export const MAX_CHOICES = 8;
export const MAX_TOP_LOGPROBS = 20;

/** A tool call id for runtimes that do not give one (Ollama), in OpenAI's shape. */
export function toolCallId(): string {
  return `call_${randomBytes(12).toString('hex')}`;
}

/**
 * Runs a task against the runtime and keeps the monitor in step with what the task found: a refused
 * connection marks the device unavailable at once; a missing model or a broken connection makes it
 * look at the runtime again now rather than at the next interval.
 */
export async function watched<T>(monitor: UpstreamMonitor, run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (code === 'upstream_unreachable') {
      monitor.markUnreachable(error instanceof Error ? error.message : String(error));
    } else if (code === 'model_not_found' || code === 'upstream_error') {
      monitor.refreshSoon();
    }
    throw error;
  }
}

const utf8 = (token: string) => [...Buffer.from(token, 'utf8')];

/**
 * One token's logprob as the protocol carries it, from a runtime's `{token, logprob, bytes?,
 * top_logprobs?}` (Ollama's and OpenAI's shapes agree). Null for an entry that is not one.
 */
export function tokenLogprob(raw: unknown, top: number): TokenLogprob | null {
  if (!raw || typeof raw !== 'object') {
    return null;
  }
  const entry = raw as { token?: unknown; logprob?: unknown; bytes?: unknown; top_logprobs?: unknown };
  if (typeof entry.token !== 'string') {
    return null;
  }
  const one = (t: { token?: unknown; logprob?: unknown; bytes?: unknown }) => {
    const token = typeof t.token === 'string' ? t.token : '';
    return {
      token,
      // vLLM writes -9999.0 for -inf; JSON has no infinities.
      logprob: typeof t.logprob === 'number' && Number.isFinite(t.logprob) ? t.logprob : -9999,
      bytes: Array.isArray(t.bytes) && t.bytes.every((b) => Number.isInteger(b)) ? (t.bytes as number[]) : utf8(token),
    };
  };
  const alternatives = Array.isArray(entry.top_logprobs) ? (entry.top_logprobs as object[]) : [];
  return {
    ...one(entry),
    top_logprobs: alternatives.slice(0, Math.min(top, MAX_TOP_LOGPROBS)).map((t) => one(t)),
  };
}
