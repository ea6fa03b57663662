import { BackendError } from '../backend';

// How the runtimes say what went wrong (their error bodies, their in-stream errors), as task errors.

/** What an error body says, whichever runtime wrote it. */
export interface UpstreamErrorBody {
  message: string;
  code?: string;
  type?: string;
}

/**
 * Reads the error bodies of the runtimes: Ollama's `{"error": "..."}`, OpenAI's and vLLM's
 * `{"error": {"message", "type", "param", "code"}}`, older vLLM's top-level `{"message", "type", "code"}`,
 * FastAPI's `{"detail": ...}`, or plain text.
 */
export function parseErrorBody(text: string): UpstreamErrorBody {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return { message: text.trim().slice(0, 1000) };
  }
  const str = (v: unknown) => (typeof v === 'string' ? v : typeof v === 'number' ? String(v) : undefined);
  if (body && typeof body === 'object') {
    const b = body as Record<string, unknown>;
    if (typeof b.error === 'string') {
      return { message: b.error };
    }
    if (b.error && typeof b.error === 'object') {
      const e = b.error as Record<string, unknown>;
      return { message: str(e.message) ?? JSON.stringify(e), code: str(e.code), type: str(e.type) };
    }
    if (typeof b.message === 'string') {
      return { message: b.message, code: str(b.code), type: str(b.type) };
    }
    if (b.detail !== undefined) {
      return { message: typeof b.detail === 'string' ? b.detail : JSON.stringify(b.detail) };
    }
  }
  return { message: text.trim().slice(0, 1000) };
}

/**
 * The runtimes' ways of saying that the prompt does not fit: OpenAI and vLLM ("maximum context
 * length is ..."), newer vLLM ("... is too long and exceeds limit", "longer than the maximum model
 * length"), llama.cpp ("exceeds the available context size", "input is too large to process"),
 * LM Studio ("context length"), Ollama ("prompt too long").
 */
const CONTEXT_PATTERN =
  /context[ _-]?(length|size|window)|maximum (context|model length)|too long|too large to process|too many tokens|exceeds? (the )?(available )?context/i;
/** Ollama refuses a request that needs a capability the model lacks: `"gemma2" does not support tools`. */
const CAPABILITY_PATTERN = /does not support (tools|thinking|insert|vision|completion)/i;

/** The task error for an upstream's HTTP error status and body. */
export function httpError(status: number, body: UpstreamErrorBody): BackendError {
  const detail = body.message || `HTTP ${status}`;
  if (
    body.code === 'context_length_exceeded' ||
    body.type === 'exceed_context_size_error' ||
    (status >= 400 && CONTEXT_PATTERN.test(detail))
  ) {
    return new BackendError('context_length_exceeded', `the prompt does not fit the model's context: ${detail}`);
  }
  if (status === 404) {
    return new BackendError('model_not_found', `the upstream does not have the model: ${detail}`);
  }
  if (CAPABILITY_PATTERN.test(detail)) {
    return new BackendError('unsupported_by_model', `the upstream model cannot do this: ${detail}`);
  }
  if (status === 401 || status === 403) {
    return new BackendError(
      'upstream_unauthorized',
      `the upstream refused the agent's credentials (HTTP ${status}): ${detail}`,
    );
  }
  if (status === 429) {
    return new BackendError('upstream_busy', `the upstream is busy (HTTP 429): ${detail}`);
  }
  if (status >= 500) {
    return new BackendError('upstream_error', `the upstream failed (HTTP ${status}): ${detail}`);
  }
  if (status >= 400) {
    return new BackendError('upstream_bad_request', `the upstream refused the request (HTTP ${status}): ${detail}`);
  }
  return new BackendError('upstream_bad_response', `the upstream answered with HTTP ${status}`);
}

/** An error a runtime reports inside its stream (an NDJSON `{"error": ...}` line, an SSE error event). */
export function streamError(body: UpstreamErrorBody): BackendError {
  if (body.code === 'context_length_exceeded' || CONTEXT_PATTERN.test(body.message)) {
    return new BackendError('context_length_exceeded', `the prompt does not fit the model's context: ${body.message}`);
  }
  return new BackendError('upstream_error', `the upstream failed mid-answer: ${body.message || 'no message'}`);
}

/** A stream line or event that is not what the runtime's format says. */
export function badResponse(what: string): BackendError {
  return new BackendError('upstream_bad_response', `the upstream sent a malformed stream: ${what}`);
}

/** A whole answer (not a stream: an embedding task's) that is not what the runtime's format says. */
export function badAnswer(what: string): BackendError {
  return new BackendError('upstream_bad_response', `the upstream sent a malformed answer: ${what}`);
}
