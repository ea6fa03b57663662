import { spawn } from 'node:child_process';
import { createHash, randomInt } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import type { IncomingHttpHeaders } from 'node:http';
import { connect, createServer } from 'node:net';
import type { Server, Socket } from 'node:net';
import { TASK_FIELDS, createRedis, KeySpace } from '@app/common';
import { expectStatus } from '../support/expect-status';
import { ADMIN_TOKEN, DATABASE_URL, Proc, REDIS_URL, db, freePort, recordsWritten, sleep } from '../support/stack';

export { deviceIdOf, startApi, startDevice, startDispatcher, waitOnline } from '../support/stack';
export { FakeDevice } from '../support/fake-device';
export { within } from '../support/stack';

/**
 * Shared fixtures of the reliability and security suites: a private redis-server, a TCP proxy that can cut
 * Postgres, an HTTP client that can send any bytes from any loopback address, and assertions for
 * the documented error shapes and for task rows that must all end.
 */

export const TERMINAL = ['completed', 'failed', 'cancelled', 'timed_out'];
export const TASK_ADDRESS = /^(direct|network):[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export const sha256 = (value: string) => createHash('sha256').update(value).digest('hex');
export const bearer = (key: string) => ({ authorization: `Bearer ${key}` });
export const adminAuth = { authorization: `Bearer ${ADMIN_TOKEN}` };

/** Stops processes: devices first (killed: they hold nothing), then dispatchers and apis. */
export async function stopAll(
  devices: Proc[],
  servers: { proc: Proc }[],
  extra: { stop(): Promise<unknown> }[] = [],
): Promise<void> {
  await Promise.all(devices.map((d) => d.stop('SIGKILL')));
  await Promise.all(servers.map((s) => s.proc.stop('SIGTERM', 3_000)));
  await Promise.all(extra.map((e) => e.stop().catch(() => undefined)));
}

/** A random loopback address, so that failed-authentication counters of different tests never meet. */
export function loopbackAddress(): string {
  return `127.${randomInt(1, 250)}.${randomInt(1, 250)}.${randomInt(2, 250)}`;
}

export interface RawResponse {
  status: number;
  headers: IncomingHttpHeaders;
  text: string;
  body: any;
}

/**
 * HTTP with node:http: any bytes as the body, any header (fetch refuses some), from a chosen
 * local address, with a bound on the whole exchange so that a hang is a test failure.
 */
export function rawHttp(
  method: string,
  url: string,
  opts: { headers?: Record<string, string>; body?: string | Buffer; localAddress?: string; timeoutMs?: number } = {},
): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const target = new URL(url);
    const req = httpRequest(
      {
        method,
        host: target.hostname,
        port: target.port,
        path: target.pathname + target.search,
        headers: opts.headers,
        localAddress: opts.localAddress,
        agent: false,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', reject);
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let body: unknown;
          try {
            body = text ? JSON.parse(text) : undefined;
          } catch {
            body = undefined;
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text, body });
        });
      },
    );
    req.setTimeout(opts.timeoutMs ?? 20_000, () => req.destroy(new Error(`${method} ${url}: no answer in time`)));
    req.on('error', reject);
    req.end(opts.body);
  });
}

/** JSON POST/PATCH/GET through {@link rawHttp}. */
export function jsonHttp(
  method: string,
  url: string,
  body: unknown,
  opts: { headers?: Record<string, string>; localAddress?: string; timeoutMs?: number } = {},
): Promise<RawResponse> {
  return rawHttp(method, url, {
    ...opts,
    headers: { 'content-type': 'application/json', ...opts.headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

/** OpenAI's error shape, `{"error":{"message","type","param","code"}}`; returns the error object. */
export function assertOpenAIError(
  res: { status: number; body: any; text: string },
  status: number | null,
  code?: string,
  param?: string | null,
): { message: string; type: string; param: string | null; code: string } {
  if (status !== null) {
    expect({
      status: res.status,
      message: `expected ${status} ${code ?? ''}, got ${res.status}: ${res.text.slice(0, 500)}`,
    }).toEqual(expect.objectContaining({ status }));
  }
  expect({
    ok: Boolean(res.body && typeof res.body === 'object' && !Array.isArray(res.body)),
    message: `not a JSON object: ${res.text}`,
  }).toEqual(expect.objectContaining({ ok: true }));
  expect(Object.keys(res.body)).toEqual(['error']);
  const error = res.body.error;
  expect({ ok: Boolean(error && typeof error === 'object'), body: res.text }).toEqual(
    expect.objectContaining({ ok: true }),
  );
  expect(Object.keys(error).sort()).toEqual(['code', 'message', 'param', 'type']);
  expect({ type: typeof error.message, body: res.text }).toEqual(expect.objectContaining({ type: 'string' }));
  expect({ ok: error.message.length > 0, body: res.text }).toEqual(expect.objectContaining({ ok: true }));
  expect({ type: typeof error.type, body: res.text }).toEqual(expect.objectContaining({ type: 'string' }));
  expect({ type: typeof error.code, body: res.text }).toEqual(expect.objectContaining({ type: 'string' }));
  expect({ ok: error.param === null || typeof error.param === 'string', body: res.text }).toEqual(
    expect.objectContaining({ ok: true }),
  );
  const s = res.status;
  const expectedType =
    error.code === 'invalid_api_key'
      ? 'invalid_request_error'
      : s === 401
        ? 'authentication_error'
        : s === 429
          ? 'rate_limit_error'
          : s === 503
            ? 'service_unavailable_error'
            : s >= 500
              ? 'server_error'
              : 'invalid_request_error';
  expect({ type: error.type, body: res.text }).toEqual(expect.objectContaining({ type: expectedType }));
  if (code !== undefined) {
    expect({ code: error.code, body: res.text }).toEqual(expect.objectContaining({ code }));
  }
  if (param !== undefined) {
    expect({ param: error.param, body: res.text }).toEqual(expect.objectContaining({ param }));
  }
  return error;
}

/** Ollama's error shape, `{"error": "<message>"}`. */
export function assertOllamaError(res: { status: number; body: any; text: string }, status: number | null): string {
  if (status !== null) {
    expect({ status: res.status, message: `expected ${status}, got ${res.status}: ${res.text.slice(0, 500)}` }).toEqual(
      expect.objectContaining({ status }),
    );
  }
  expect({
    ok: Boolean(res.body && typeof res.body === 'object' && !Array.isArray(res.body)),
    message: `not a JSON object: ${res.text}`,
  }).toEqual(expect.objectContaining({ ok: true }));
  expect(Object.keys(res.body)).toEqual(['error']);
  expect({ type: typeof res.body.error, body: res.text }).toEqual(expect.objectContaining({ type: 'string' }));
  expect({ ok: res.body.error.length > 0, body: res.text }).toEqual(expect.objectContaining({ ok: true }));
  return res.body.error;
}

/** Polls the task rows matching `where` until `check` holds for them; returns them. */
export async function waitTasks(
  where: Record<string, unknown>,
  check: (rows: Awaited<ReturnType<ReturnType<typeof db>['task']['findMany']>>) => boolean,
  timeoutMs = 15_000,
  what = 'tasks',
) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const rows = await db().task.findMany({ where, orderBy: { queuedAt: 'asc' } });
    if (check(rows)) {
      return rows;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `timed out waiting for ${what}: ${JSON.stringify(rows.map((r) => [r.address, r.status, r.errorCode]))}`,
      );
    }
    await sleep(50);
  }
}

/** Waits until every task row of an organization is terminal (and there is at least `min`). */
export async function waitAllTerminal(orgId: string, timeoutMs = 15_000, min = 1) {
  return waitTasks(
    { orgId },
    (rows) => rows.length >= min && rows.every((r) => TERMINAL.includes(r.status)),
    timeoutMs,
    `every task of org ${orgId} to end`,
  );
}

/**
 * Waits for a task of the org in the given status (the newest such) and returns its row, once written.
 * The status is the task's live state in Redis when it has one: rows are written behind and can lag
 * behind a short task.
 */
export async function waitStatus(orgId: string, status: string, timeoutMs = 15_000, extra: object = {}) {
  const redis = createRedis(REDIS_URL);
  try {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const rows = await db().task.findMany({ where: { orgId, ...extra }, orderBy: { queuedAt: 'desc' }, take: 50 });
      const live = await Promise.all(
        rows.map((r) => redis.hget(KeySpace.of(redis).taskState(r.id), TASK_FIELDS.status)),
      );
      const found = rows.find((r, i) => (live[i] ?? r.status) === status);
      if (found) {
        // The row once it holds that transition (and whatever came after): its device, its times.
        await recordsWritten();
        return db().task.findUniqueOrThrow({ where: { id: found.id } });
      }
      if (Date.now() > deadline) {
        throw new Error(`timed out waiting for a task of org ${orgId} in status ${status}`);
      }
      await sleep(20);
    }
  } finally {
    redis.disconnect();
  }
}

/** Server-Sent Events parsed into their data payloads (`[DONE]` kept as the string). */
export function sseEvents(text: string): any[] {
  const events: any[] = [];
  for (const line of text.split('\n')) {
    if (line.startsWith('data: ')) {
      const data = line.slice(6);
      events.push(data === '[DONE]' ? '[DONE]' : JSON.parse(data));
    }
  }
  return events;
}

/** The concatenated content of choice 0 of streamed chunks. */
export function sseContent(events: any[]): string {
  return events
    .filter((e) => e !== '[DONE]' && Array.isArray(e.choices))
    .flatMap((e) => e.choices.filter((c: any) => c.index === 0).map((c: any) => c.delta?.content ?? ''))
    .join('');
}

/**
 * A streaming request that the test can read progressively and abort. `done` resolves with the
 * whole text once the server ends the response (or with what arrived when it was aborted).
 */
export class LiveStream {
  status = 0;
  headers: Headers | null = null;
  text = '';
  error: unknown = null;
  readonly controller = new AbortController();
  readonly done: Promise<void>;
  private readonly opened: Promise<void>;

  constructor(url: string, key: string, body: unknown, headers: Record<string, string> = {}) {
    let open!: () => void;
    this.opened = new Promise<void>((resolve) => (open = resolve));
    this.done = (async () => {
      try {
        const res = await fetch(url, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
          body: JSON.stringify(body),
          signal: this.controller.signal,
        });
        this.status = res.status;
        this.headers = res.headers;
        open();
        const reader = res.body!.getReader();
        const decoder = new TextDecoder();
        for (;;) {
          const { value, done } = await reader.read();
          if (done) {
            break;
          }
          this.text += decoder.decode(value, { stream: true });
        }
      } catch (error) {
        this.error = error;
      } finally {
        open();
      }
    })();
  }

  /** Resolves once the status line arrived (or the request failed). */
  async response(): Promise<void> {
    await this.opened;
  }

  get events(): any[] {
    return sseEvents(this.text.slice(0, this.text.lastIndexOf('\n\n') + 2));
  }

  /** Waits until the received text matches. */
  async waitFor(pattern: RegExp, timeoutMs = 15_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!pattern.test(this.text)) {
      if (Date.now() > deadline) {
        throw new Error(`stream never matched ${String(pattern)}; got (${this.status}): ${this.text.slice(0, 500)}`);
      }
      await sleep(20);
    }
  }

  abort(): void {
    this.controller.abort();
  }
}

/** A stream that ended: whole (the reference content, [DONE]) or with an explicit error event. */
export function assertStreamEnded(live: LiveStream, expected: string): 'whole' | 'error' {
  expectStatus(live, 200);
  const events = live.events;
  const content = sseContent(events);
  if (events.at(-1) === '[DONE]') {
    // a stream that ends with [DONE] carries the whole answer, once
    expect(content).toBe(expected);
    return 'whole';
  }
  const last = events.at(-1);
  expect({
    ok: Boolean(last?.error?.code),
    message: `neither [DONE] nor an error event at the end: ${live.text.slice(-400)}`,
  }).toEqual(expect.objectContaining({ ok: true }));
  expect(last.error.type).toBe('server_error');
  expect({
    ok: expected.startsWith(content),
    message: `not a prefix of the answer:\n${content}\n${expected}`,
  }).toEqual(expect.objectContaining({ ok: true }));
  return 'error';
}

/** A redis-server of the test's own, without persistence: a restart loses everything, as in production without AOF. */
export class RedisServer {
  proc: Proc | null = null;

  constructor(readonly port: number) {}

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  static async start(): Promise<RedisServer> {
    const server = new RedisServer(await freePort());
    await server.start();
    return server;
  }

  async start(): Promise<void> {
    const proc = new Proc(
      spawn('redis-server', ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
        stdio: ['ignore', 'pipe', 'pipe'],
      }),
    );
    this.proc = proc;
    await proc.waitFor(/Ready to accept connections/, 15_000);
  }

  /** Kills the server (SIGKILL: nothing is saved). */
  async kill(): Promise<void> {
    await this.proc?.stop('SIGKILL');
    this.proc = null;
  }

  async stop(): Promise<void> {
    await this.kill();
  }
}

/** Sees what each client of a TcpProxy sends: called once per connection, it returns that connection's reader. */
export type ProxyTap = () => (chunk: Buffer) => void;

/**
 * A TCP proxy (node:net) in front of a server, which the test can cut: `cut()` resets every open
 * connection and refuses new ones, as a network failure or a restarting database does; `restore()`
 * lets connections through again. A tap, if given, reads what the clients send.
 */
export class TcpProxy {
  private server: Server | null = null;
  private readonly sockets = new Set<Socket>();
  private cutOff = false;

  private constructor(
    readonly port: number,
    private readonly targetHost: string,
    private readonly targetPort: number,
    private readonly tap?: ProxyTap,
  ) {}

  static async start(targetHost: string, targetPort: number, tap?: ProxyTap): Promise<TcpProxy> {
    const proxy = new TcpProxy(await freePort(), targetHost, targetPort, tap);
    await proxy.listen();
    return proxy;
  }

  private async listen(): Promise<void> {
    const server = createServer((client) => {
      if (this.cutOff) {
        client.resetAndDestroy();
        return;
      }
      const upstream = connect(this.targetPort, this.targetHost);
      this.sockets.add(client);
      this.sockets.add(upstream);
      const drop = () => {
        client.destroy();
        upstream.destroy();
        this.sockets.delete(client);
        this.sockets.delete(upstream);
      };
      if (this.tap) {
        client.on('data', this.tap());
      }
      client.on('error', drop);
      upstream.on('error', drop);
      client.on('close', drop);
      upstream.on('close', drop);
      client.pipe(upstream);
      upstream.pipe(client);
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => resolve());
    });
    this.server = server;
  }

  /** Resets every connection through the proxy and refuses new ones. */
  cut(): void {
    this.cutOff = true;
    for (const socket of this.sockets) {
      socket.resetAndDestroy();
    }
    this.sockets.clear();
  }

  restore(): void {
    this.cutOff = false;
  }

  async stop(): Promise<void> {
    this.cut();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }
}

/** The test database's URL with another host and port (to go through a proxy). */
export function databaseUrlVia(port: number): string {
  const url = new URL(DATABASE_URL);
  url.hostname = '127.0.0.1';
  url.port = String(port);
  return url.toString();
}

/** Host and port of the test database. */
export function databaseTarget(): { host: string; port: number } {
  const url = new URL(DATABASE_URL);
  return { host: url.hostname, port: Number(url.port || 5432) };
}

/** A chat request body with one user message. */
export const chatBody = (model: string, content: string, extra: Record<string, unknown> = {}) => ({
  model,
  messages: [{ role: 'user', content }],
  ...extra,
});

/** Polls until `fn` returns a truthy value (or throws at the deadline). */
export async function eventually<T>(fn: () => Promise<T>, timeoutMs = 15_000, what = 'condition'): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await fn();
      if (value) {
        return value;
      }
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}${last instanceof Error ? `: ${last.message}` : ''}`);
    }
    await sleep(50);
  }
}

/** Value of one sample of a Prometheus text exposition (sum over the samples that match every label). */
export function metricValue(text: string, name: string, labels: Record<string, string> = {}): number {
  let total = 0;
  let found = false;
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || !line.startsWith(name)) {
      continue;
    }
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!match || match[1] !== name) {
      continue;
    }
    const body = match[3] ?? '';
    const has = Object.entries(labels).every(([k, v]) => body.includes(`${k}="${v}"`));
    if (has) {
      total += Number(match[4]);
      found = true;
    }
  }
  return found ? total : NaN;
}
