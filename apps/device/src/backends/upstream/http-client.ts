import http from 'node:http';
import type { ClientRequest, IncomingMessage } from 'node:http';
import https from 'node:https';
import type { Socket } from 'node:net';
import { StringDecoder } from 'node:string_decoder';
import { BackendError, cancelledError } from '../backend';
import { httpError, parseErrorBody } from './runtime-errors';

/**
 * The agent's HTTP client for local runtimes, on node:http rather than fetch: no hidden headers or
 * body timeout (a runtime may think for minutes before its first byte while it loads a model or
 * evaluates a long prompt), plain error codes, and warm connections: a finished request leaves its
 * connection open for the next one (a new TCP connection costs a round trip and a wake-up of the
 * runtime before the request is even sent). A cancelled request still closes its socket, which is how
 * Ollama, llama.cpp and vLLM notice that they should stop generating.
 */

/**
 * An idle connection is closed after this long, before the runtimes close theirs (uvicorn, which
 * serves vLLM, and llama.cpp's server after 5 s): a request rarely meets a connection the runtime is
 * closing at that moment, and when it does, it is sent again on a new one (see send).
 */
const IDLE_SOCKET_MS = 2_000;

/** Node's keep-alive agent, with an idle timeout on its pooled connections only. */
function keepAlive<A extends http.Agent>(agent: A): A {
  // Node's Agent returns whether it keeps the socket (its types say void).
  const keep = agent.keepSocketAlive.bind(agent) as unknown as (socket: Socket) => boolean;
  const reuse = agent.reuseSocket.bind(agent);
  Object.assign(agent, {
    keepSocketAlive(socket: Socket): boolean {
      const kept = keep(socket);
      if (kept) {
        // A pooled socket that times out is destroyed by the agent.
        socket.setTimeout(IDLE_SOCKET_MS);
      }
      return kept;
    },
    reuseSocket(socket: Socket, request: ClientRequest): void {
      // In use again: a runtime may be silent for minutes before its first byte.
      socket.setTimeout(0);
      reuse(socket, request);
    },
  });
  return agent;
}

const AGENTS = {
  'http:': keepAlive(new http.Agent({ keepAlive: true })),
  'https:': keepAlive(new https.Agent({ keepAlive: true })),
};

/** A pooled connection the runtime closed just as it was reused: the request never reached it. */
const STALE_CONNECTION_CODES = new Set(['ECONNRESET', 'EPIPE']);

/** Socket errors that mean nothing listens there (or the host is gone): the runtime is down. */
const UNREACHABLE_CODES = new Set([
  'ECONNREFUSED',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EHOSTDOWN',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ETIMEDOUT',
  'EADDRNOTAVAIL',
  'UPSTREAM_CONNECT_TIMEOUT',
]);

/** An error body is read up to this size; the rest is not needed to say what went wrong. */
const MAX_ERROR_BODY = 64 * 1024;
/** One NDJSON line or SSE line longer than this is not a runtime's output: the stream is malformed. */
export const MAX_LINE = 8 * 1024 * 1024;
/**
 * The largest answer read whole (an embedding task's). 2,048 vectors of 4,096 dimensions take about
 * 100 MiB of JSON; this leaves room above that while staying well within V8's longest string (about
 * 512 MiB), which the body becomes before it is parsed.
 */
export const MAX_JSON_BODY = 256 * 1024 * 1024;

export interface UpstreamRequest {
  method: 'GET' | 'POST';
  url: URL;
  /** Sent as `Authorization: Bearer ...` when set; never logged, never part of an error message. */
  apiKey?: string;
  /** Serialized as JSON. */
  body?: unknown;
  /** Sent as the `traceparent` header (W3C trace context), so that a traced runtime joins the request's trace. */
  traceparent?: string;
  signal: AbortSignal;
  /** Time allowed to open the TCP (and TLS) connection; after that the runtime counts as unreachable. */
  connectTimeoutMs: number;
}

/** Where a request went, for messages: the origin and path, never credentials or a query string. */
export function describeUrl(url: URL): string {
  return `${url.origin}${url.pathname}`;
}

/**
 * Sends a request and resolves with the response once its headers arrive (any status). A request
 * sent on a pooled connection that the runtime had closed meanwhile is sent once more, on a new one.
 */
export function send(request: UpstreamRequest): Promise<IncomingMessage> {
  const { url, signal } = request;
  const payload = request.body === undefined ? undefined : Buffer.from(JSON.stringify(request.body), 'utf8');
  const headers: Record<string, string> = { accept: 'application/json, application/x-ndjson, text/event-stream' };
  if (payload) {
    headers['content-type'] = 'application/json';
    headers['content-length'] = String(payload.length);
  }
  if (request.apiKey) {
    headers.authorization = `Bearer ${request.apiKey}`;
  }
  if (request.traceparent) {
    headers.traceparent = request.traceparent;
  }
  const client = url.protocol === 'https:' ? https : http;
  const agent = url.protocol === 'https:' ? AGENTS['https:'] : AGENTS['http:'];
  const attempt = (retry: boolean): Promise<IncomingMessage> =>
    new Promise((resolve, reject) => {
      if (signal.aborted) {
        reject(cancelledError());
        return;
      }
      // Not http.request's own `signal`: it stays attached to the connection, and a task aborted after
      // its answer (every task is, when it ends) would destroy the pooled connection with an error.
      const req = client.request(url, { method: request.method, headers, agent });
      let response: IncomingMessage | undefined;
      const abort = () => {
        // A response received in full needs no stopping, and its connection may be back in the pool.
        if (!req.destroyed && response?.complete !== true) {
          req.destroy(cancelledError());
        }
      };
      signal.addEventListener('abort', abort, { once: true });
      const detach = () => signal.removeEventListener('abort', abort);
      req.on('close', detach);
      let connectTimer: NodeJS.Timeout | undefined;
      req.on('socket', (socket) => {
        if (socket.connecting) {
          connectTimer = setTimeout(() => {
            const error = new Error(`no connection within ${request.connectTimeoutMs} ms`) as NodeJS.ErrnoException;
            error.code = 'UPSTREAM_CONNECT_TIMEOUT';
            req.destroy(error);
          }, request.connectTimeoutMs);
          socket.once('connect', () => clearTimeout(connectTimer));
        }
      });
      req.on('response', (res) => {
        clearTimeout(connectTimer);
        response = res;
        res.once('end', detach);
        resolve(res);
      });
      req.on('error', (error: NodeJS.ErrnoException) => {
        clearTimeout(connectTimer);
        if (retry && req.reusedSocket && !signal.aborted && STALE_CONNECTION_CODES.has(error.code ?? '')) {
          resolve(attempt(false));
          return;
        }
        reject(requestError(error, url, signal));
      });
      req.end(payload);
    });
  return attempt(true);
}

/** Maps a socket-level failure: cancelled, unreachable (the runtime is down) or a broken exchange. */
export function requestError(error: unknown, url: URL, signal: AbortSignal): Error {
  if (signal.aborted) {
    return cancelledError();
  }
  if (error instanceof BackendError) {
    return error;
  }
  const code = (error as NodeJS.ErrnoException | null)?.code;
  if (code && UNREACHABLE_CODES.has(code)) {
    const why = code === 'UPSTREAM_CONNECT_TIMEOUT' ? 'connection timed out' : code;
    return new BackendError('upstream_unreachable', `cannot reach the upstream at ${describeUrl(url)} (${why})`);
  }
  const message = error instanceof Error ? error.message : String(error);
  return new BackendError('upstream_error', `the connection to the upstream failed: ${code ?? message}`);
}

/** Reads a (small) response body as text, up to `limit` bytes. */
export async function readText(res: IncomingMessage, url: URL, signal: AbortSignal, limit = MAX_ERROR_BODY) {
  const decoder = new StringDecoder('utf8');
  let text = '';
  try {
    for await (const chunk of res) {
      text += decoder.write(chunk as Buffer);
      if (text.length >= limit) {
        res.destroy();
        return text.slice(0, limit);
      }
    }
  } catch (error) {
    throw requestError(error, url, signal);
  }
  return text + decoder.end();
}

/** Responses whose last event the caller has read (see finished). */
const finishedResponses = new WeakSet<IncomingMessage>();

/** How long a response whose last event was read may take to end before its connection is closed. */
const END_GRACE_MS = 1_000;

/**
 * The caller has read the runtime's last event (`[DONE]`, `done: true`): once the response ends, its
 * connection goes back to the pool instead of being closed (see readLines).
 */
export function finished(res: IncomingMessage): void {
  finishedResponses.add(res);
}

/**
 * The lines of a streamed body (without their `\n` or `\r\n`), as they arrive. A last line without a
 * newline is yielded too. Throws `upstream_bad_response` for a line longer than {@link MAX_LINE}.
 *
 * A caller that stops reading before the body's end lets go of the response: one whose last event it
 * read (see finished) is drained, so that its connection is reused; any other (a stop string met, a
 * malformed stream, a cancel) is destroyed, which closes the connection and tells the runtime to stop
 * generating.
 */
export async function* readLines(res: IncomingMessage, url: URL, signal: AbortSignal): AsyncGenerator<string> {
  const decoder = new StringDecoder('utf8');
  let buffer = '';
  try {
    for await (const chunk of res.iterator({ destroyOnReturn: false })) {
      buffer += decoder.write(chunk as Buffer);
      let newline: number;
      while ((newline = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + 1);
        yield line.endsWith('\r') ? line.slice(0, -1) : line;
      }
      if (buffer.length > MAX_LINE) {
        throw new BackendError('upstream_bad_response', `the upstream sent a line longer than ${MAX_LINE} bytes`);
      }
    }
  } catch (error) {
    throw requestError(error, url, signal);
  } finally {
    if (!res.readableEnded) {
      letGo(res, finishedResponses.has(res) && !signal.aborted);
    }
  }
  buffer += decoder.end();
  if (buffer.length > 0) {
    yield buffer.endsWith('\r') ? buffer.slice(0, -1) : buffer;
  }
}

function letGo(res: IncomingMessage, reuse: boolean): void {
  // Nobody reads it any more: its late errors (the connection cut here) are nobody's business.
  res.on('error', () => undefined);
  if (!reuse) {
    res.destroy();
    return;
  }
  const timer = setTimeout(() => res.destroy(), END_GRACE_MS);
  res.once('close', () => clearTimeout(timer));
  res.resume();
}

/** A response that is not a success: reads its body and turns it into the task error. */
export async function failure(res: IncomingMessage, url: URL, signal: AbortSignal): Promise<BackendError> {
  const text = await readText(res, url, signal);
  return httpError(res.statusCode ?? 0, parseErrorBody(text));
}

/** GETs a JSON document (discovery and health probes). */
export async function getJson(
  url: URL,
  options: { apiKey?: string; signal: AbortSignal; connectTimeoutMs: number },
): Promise<unknown> {
  const res = await send({ method: 'GET', url, ...options });
  if ((res.statusCode ?? 0) < 200 || (res.statusCode ?? 0) >= 300) {
    throw await failure(res, url, options.signal);
  }
  const text = await readText(res, url, options.signal, MAX_LINE);
  try {
    return JSON.parse(text);
  } catch {
    throw new BackendError('upstream_bad_response', `${describeUrl(url)} did not answer with JSON`);
  }
}

/**
 * POSTs a JSON request and reads its JSON answer whole (an embedding task's): a status other than 200
 * is the task error its body says ({@link failure}), a body over {@link MAX_JSON_BODY} or not JSON is
 * `upstream_bad_response`. A body read to its end leaves its connection to the next request.
 */
export async function postJson(
  url: URL,
  body: unknown,
  options: { apiKey?: string; signal: AbortSignal; connectTimeoutMs: number; traceparent?: string },
  limit = MAX_JSON_BODY,
): Promise<unknown> {
  const { signal } = options;
  const res = await send({ method: 'POST', url, body, ...options });
  if (res.statusCode !== 200) {
    throw await failure(res, url, signal);
  }
  return readJson(res, url, signal, limit);
}

/** A response's body read whole (at most `limit` bytes) and parsed as JSON; a BackendError when it is not. */
export async function readJson(
  res: IncomingMessage,
  url: URL,
  signal: AbortSignal,
  limit = MAX_JSON_BODY,
): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of res) {
      size += (chunk as Buffer).length;
      if (size > limit) {
        res.destroy();
        throw new BackendError('upstream_bad_response', `${describeUrl(url)} answered more than ${limit} bytes`);
      }
      chunks.push(chunk as Buffer);
    }
  } catch (error) {
    throw requestError(error, url, signal);
  }
  try {
    return JSON.parse(Buffer.concat(chunks, size).toString('utf8'));
  } catch {
    throw new BackendError('upstream_bad_response', `${describeUrl(url)} did not answer with JSON`);
  }
}

/** `base` with `path` appended to its path (`http://h:8000/v1` + `/models` → `http://h:8000/v1/models`). */
export function endpoint(base: URL, path: string): URL {
  const url = new URL(base.href);
  url.pathname = `${url.pathname.replace(/\/+$/, '')}${path}`;
  url.search = '';
  url.hash = '';
  return url;
}
