import { createHash } from 'node:crypto';
import OpenAI from 'openai';
import { closeDb, http, startApi, startDevice, startDispatcher, taskCount, waitTerminal } from '../support/stack';
import type { Api, DeviceOptions, Dispatcher, Proc } from '../support/stack';
import { expectStatus } from '../support/expect-status';

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
  expect({ status: res.status, message: `expected ${status} ${code ?? ''}, got ${res.status}: ${res.text}` }).toEqual(
    expect.objectContaining({ status }),
  );
  expect({ ok: Boolean(res.body && typeof res.body === 'object'), message: `not JSON: ${res.text}` }).toEqual(
    expect.objectContaining({ ok: true }),
  );
  expect(Object.keys(res.body)).toEqual(['error']);
  const error = res.body.error;
  expect(Object.keys(error).sort()).toEqual(['code', 'message', 'param', 'type']);
  if (code !== null) {
    expect({ code: error.code, body: res.text }).toEqual(expect.objectContaining({ code }));
  } else {
    expect({ type: typeof error.code, body: res.text }).toEqual(expect.objectContaining({ type: 'string' }));
  }
  expect(typeof error.message).toBe('string');
  expect(error.message.length > 0).toBe(true);
  if (status >= 400 && status < 500 && status !== 401 && status !== 429) {
    expect({ type: error.type, body: res.text }).toEqual(expect.objectContaining({ type: 'invalid_request_error' }));
  }
  if (param !== undefined) {
    expect({ param: error.param, body: res.text }).toEqual(expect.objectContaining({ param }));
  }
  if (res.headers) {
    expect(res.headers.get('content-type') ?? '').toMatch(/^application\/json/);
  }
  return error;
}

/** How many task rows an organization has. */

/** The chunks of a parsed SSE answer (everything but `[DONE]`), after checking the framing. */
export function chunksOf(sse: { status: number; headers: Headers; text: string; events: any[] }): any[] {
  expectStatus(sse, 200);
  expect(sse.headers.get('content-type') ?? '').toMatch(/^text\/event-stream/);
  // Only `data: <one line>` frames, each ended by a blank line; the last is [DONE].
  // not data-only SSE framing
  expect(sse.text).toMatch(/^(data: [^\n]+\n\n)+$/);
  expect({
    ok: sse.text.endsWith('data: [DONE]\n\n'),
    message: `does not end with [DONE]: ${sse.text.slice(-200)}`,
  }).toEqual(expect.objectContaining({ ok: true }));
  expect(sse.events.at(-1)).toBe('[DONE]');
  expect(sse.events.filter((e) => e === '[DONE]')).toHaveLength(1);
  const chunks = sse.events.slice(0, -1);
  expect(chunks.length).toBeGreaterThan(0);
  for (const chunk of chunks) {
    expect({ error: chunk.error, message: `error event: ${JSON.stringify(chunk)}` }).toEqual(
      expect.objectContaining({ error: undefined }),
    );
  }
  return chunks;
}

/** Checks what every chunk of one stream shares, and returns the id and task address. */
export function assertChunkEnvelope(chunks: any[], model: string): { id: string; task_address: string; mode: string } {
  const [first] = chunks;
  expect(first.id).toMatch(COMPLETION_ID);
  expect(first.task_address).toMatch(TASK_ADDRESS);
  expect(first.mode === 'direct' || first.mode === 'network').toBe(true);
  expect(first.task_address.startsWith(`${first.mode}:`)).toBe(true);
  for (const chunk of chunks) {
    expect(chunk.object).toBe('chat.completion.chunk');
    expect(chunk.id).toBe(first.id);
    expect(chunk.created).toBe(first.created);
    expect(chunk.model).toBe(model);
    expect(chunk.mode).toBe(first.mode);
    expect(chunk.task_address).toBe(first.task_address);
    expect(Array.isArray(chunk.choices)).toBe(true);
  }
  expect(Number.isInteger(first.created)).toBe(true);
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
        expect({ actual: out[choice.index], message: `choice ${choice.index} finished twice` }).toEqual(
          expect.objectContaining({ actual: undefined }),
        );
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
  expect({ length: finishes.length, message: `finish reasons: ${JSON.stringify(finishes)}` }).toEqual(
    expect.objectContaining({ length: n }),
  );
  for (let index = 0; index < n; index++) {
    const entries = chunks.flatMap((chunk, at) =>
      (chunk.choices as any[]).filter((c) => c.index === index).map((c) => ({ c, at })),
    );
    expect({ ok: entries.length >= 2, message: `choice ${index}: ${entries.length} chunks` }).toEqual(
      expect.objectContaining({ ok: true }),
    );
    expect(entries[0].c.delta).toEqual({ role: 'assistant', content: '' });
    expect(entries[0].c.finish_reason).toBeNull();
    const last = entries.at(-1)!;
    expect({ at: last.at, message: `choice ${index}: something after its finish chunk` }).toEqual(
      expect.objectContaining({ at: finishes[index].at }),
    );
    for (const { c } of entries.slice(1, -1)) {
      expect(c.finish_reason).toBeNull();
      expect({ role: c.delta.role, message: `choice ${index}: role repeated` }).toEqual(
        expect.objectContaining({ role: undefined }),
      );
    }
  }
}

/** Polls until the row is terminal; asserts it completed. */
export async function completedTask(address: string) {
  const task = await waitTerminal(address);
  expect({ status: task.status, message: `task ${address}: ${task.status} ${task.errorCode ?? ''}` }).toEqual(
    expect.objectContaining({ status: 'completed' }),
  );
  return task;
}
