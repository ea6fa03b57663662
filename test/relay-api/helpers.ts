import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import OpenAI from 'openai';
import { closeDb, http, startApi, startDevice, startDispatcher, taskCount, waitTerminal } from '../support/stack';
import type { Api, DeviceOptions, Dispatcher, Proc } from '../support/stack';

/** Shared fixtures and assertions of the relay API suites (issue 3: POST /v1/chat/completions). */

export { startApi, startDispatcher, startDevice, taskCount };

export const COMPLETION_ID = /^chatcmpl-[0-9a-f]{24}$/;
export const TASK_ADDRESS = /^(direct|network):[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
export const SHA256_HEX = /^[0-9a-f]{64}$/;

/** A conversation of 3 + 6 = 9 words: the sim counts prompt tokens as words. */
export const MESSAGES = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Tell me about the rail yard.' },
] as const;
export const PROMPT_WORDS = 9;

export const sha256 = (value: string) => createHash('sha256').update(value).digest('hex');

export const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

/** One api and one dispatcher, as real processes, plus the devices a suite starts. */
export class Relay {
  api!: Api;
  dispatcher!: Dispatcher;
  readonly devices: Proc[] = [];

  async start(apiEnv: Record<string, string> = {}, dispatcherEnv: Record<string, string> = {}): Promise<void> {
    const [api, dispatcher] = await Promise.allSettled([startApi(apiEnv), startDispatcher(dispatcherEnv)]);
    if (api.status === 'fulfilled') {
      this.api = api.value;
    }
    if (dispatcher.status === 'fulfilled') {
      this.dispatcher = dispatcher.value;
    }
    for (const result of [api, dispatcher]) {
      if (result.status === 'rejected') {
        throw result.reason;
      }
    }
  }

  /** Starts a sim device and keeps it to stop in {@link stop}. */
  async device(token: string, opts: DeviceOptions, pool = 'network'): Promise<Proc> {
    const proc = await startDevice(this.dispatcher, token, opts, { pool });
    this.devices.push(proc);
    return proc;
  }

  /** Starts several sim devices at once; all that start are kept even when one fails. */
  async deviceSet(specs: { token: string; opts: DeviceOptions; pool?: string }[]): Promise<Proc[]> {
    const results = await Promise.allSettled(specs.map((s) => this.device(s.token, s.opts, s.pool)));
    for (const result of results) {
      if (result.status === 'rejected') {
        throw result.reason;
      }
    }
    return results.map((r) => (r as PromiseFulfilledResult<Proc>).value);
  }

  /** Devices first (they finish their task), then the dispatcher and the api, then the database client. */
  async stop(): Promise<void> {
    // A process that died during the suite is a failure of its own, with its output to explain it.
    const procs: [string, Proc | undefined][] = [
      ['api', this.api?.proc],
      ['dispatcher', this.dispatcher?.proc],
      ...this.devices.map((d, i): [string, Proc] => [`device ${i}`, d]),
    ];
    const died = procs
      .filter(([, p]) => p && (p.child.exitCode !== null || p.child.signalCode !== null))
      .map(([name, p]) => `${name} exited (${p!.child.exitCode ?? p!.child.signalCode}):\n${p!.output}`);
    await Promise.all(this.devices.map((d) => d.stop('SIGTERM', 3_000)));
    await Promise.all([this.dispatcher?.stop(), this.api?.stop()]);
    await closeDb();
    if (died.length > 0) {
      throw new Error(died.join('\n'));
    }
  }

  get url(): string {
    return `${this.api.url}/v1/chat/completions`;
  }

  /** The official SDK, without retries so that an error is seen as the server sent it. */
  client(key: string): OpenAI {
    return new OpenAI({ baseURL: `${this.api.url}/v1`, apiKey: key, maxRetries: 0, timeout: 30_000 });
  }

  /** A raw POST /v1/chat/completions. */
  chat(key: string, body: unknown) {
    return http('POST', this.url, { body, headers: bearer(key) });
  }
}

/** Asserts OpenAI's error shape and returns the error object. */
export function assertError(
  res: { status: number; body: any; text: string; headers?: Headers },
  status: number,
  code: string | null,
  param?: string | null,
) {
  assert.equal(res.status, status, `expected ${status} ${code ?? ''}, got ${res.status}: ${res.text}`);
  assert.ok(res.body && typeof res.body === 'object', `not JSON: ${res.text}`);
  expect(Object.keys(res.body)).toEqual(['error']);
  const error = res.body.error;
  expect(Object.keys(error).sort()).toEqual(['code', 'message', 'param', 'type']);
  if (code !== null) {
    assert.equal(error.code, code, res.text);
  } else {
    assert.equal(typeof error.code, 'string', res.text);
  }
  assert.equal(typeof error.message, 'string');
  assert.ok(error.message.length > 0);
  if (status >= 400 && status < 500 && status !== 401 && status !== 429) {
    assert.equal(error.type, 'invalid_request_error', res.text);
  }
  if (param !== undefined) {
    assert.equal(error.param, param, res.text);
  }
  if (res.headers) {
    assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
  }
  return error;
}

/** How many task rows an organization has. */

/** The chunks of a parsed SSE answer (everything but `[DONE]`), after checking the framing. */
export function chunksOf(sse: { status: number; headers: Headers; text: string; events: any[] }): any[] {
  assert.equal(sse.status, 200, sse.text);
  assert.match(sse.headers.get('content-type') ?? '', /^text\/event-stream/);
  // Only `data: <one line>` frames, each ended by a blank line; the last is [DONE].
  assert.match(sse.text, /^(data: [^\n]+\n\n)+$/, 'not data-only SSE framing');
  assert.ok(sse.text.endsWith('data: [DONE]\n\n'), `does not end with [DONE]: ${sse.text.slice(-200)}`);
  assert.equal(sse.events.at(-1), '[DONE]');
  assert.equal(sse.events.filter((e) => e === '[DONE]').length, 1);
  const chunks = sse.events.slice(0, -1);
  assert.ok(chunks.length > 0);
  for (const chunk of chunks) {
    assert.equal(chunk.error, undefined, `error event: ${JSON.stringify(chunk)}`);
  }
  return chunks;
}

/** Checks what every chunk of one stream shares, and returns the id and task address. */
export function assertChunkEnvelope(chunks: any[], model: string): { id: string; task_address: string; mode: string } {
  const [first] = chunks;
  assert.match(first.id, COMPLETION_ID);
  assert.match(first.task_address, TASK_ADDRESS);
  assert.ok(first.mode === 'direct' || first.mode === 'network');
  assert.ok(first.task_address.startsWith(`${first.mode}:`));
  for (const chunk of chunks) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    assert.equal(chunk.id, first.id);
    assert.equal(chunk.created, first.created);
    assert.equal(chunk.model, model);
    assert.equal(chunk.mode, first.mode);
    assert.equal(chunk.task_address, first.task_address);
    assert.ok(Array.isArray(chunk.choices));
  }
  assert.ok(Number.isInteger(first.created));
  return { id: first.id, task_address: first.task_address, mode: first.mode };
}

/** The concatenated `delta.content` of each choice index. */
export function streamedContent(chunks: any[]): string[] {
  const out: string[] = [];
  for (const chunk of chunks) {
    for (const choice of chunk.choices ?? []) {
      out[choice.index] = (out[choice.index] ?? '') + (choice.delta?.content ?? '');
    }
  }
  return out;
}

/** The finish_reason of each choice index, and the position of the chunk that carried it. */
export function finishReasons(chunks: any[]): { reason: string; at: number }[] {
  const out: { reason: string; at: number }[] = [];
  chunks.forEach((chunk, at) => {
    for (const choice of chunk.choices ?? []) {
      if (choice.finish_reason !== null && choice.finish_reason !== undefined) {
        assert.equal(out[choice.index], undefined, `choice ${choice.index} finished twice`);
        out[choice.index] = { reason: choice.finish_reason, at };
      }
    }
  });
  return out;
}

/**
 * Checks the streaming contract for each of `n` choices: a first chunk with the role and empty
 * content, content chunks with finish_reason null, then one chunk with the finish reason, after
 * which the choice sends nothing more.
 */
export function assertChoiceFraming(chunks: any[], n: number): void {
  const finishes = finishReasons(chunks);
  assert.equal(finishes.length, n, `finish reasons: ${JSON.stringify(finishes)}`);
  for (let index = 0; index < n; index++) {
    const entries = chunks.flatMap((chunk, at) =>
      (chunk.choices as any[]).filter((c) => c.index === index).map((c) => ({ c, at })),
    );
    assert.ok(entries.length >= 2, `choice ${index}: ${entries.length} chunks`);
    expect(entries[0].c.delta).toEqual({ role: 'assistant', content: '' });
    assert.equal(entries[0].c.finish_reason, null);
    const last = entries.at(-1)!;
    assert.equal(last.at, finishes[index].at, `choice ${index}: something after its finish chunk`);
    for (const { c } of entries.slice(1, -1)) {
      assert.equal(c.finish_reason, null);
      assert.equal(c.delta.role, undefined, `choice ${index}: role repeated`);
    }
  }
}

/** Polls until the row is terminal; asserts it completed. */
export async function completedTask(address: string) {
  const task = await waitTerminal(address);
  assert.equal(task.status, 'completed', `task ${address}: ${task.status} ${task.errorCode ?? ''}`);
  return task;
}
