import { closeDb, createDevice, createTenant, startApi, startDispatcher, uniq } from '../../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../../support/stack';
import { postSse } from '../../support/sse';
import { chat, completionsUrl, startRuntimeDevice, taskRow } from './device';
import type { ChatHandler } from './fake-runtimes';
import { FakeOllama, FakeOpenAI } from './fake-runtimes';
import { expectStatus } from '../../support/expect-status';

interface ErrorCase {
  name: string;
  /** The upstream model name the case is served under; no handler = the runtime does not have it. */
  upstream: string;
  handler?: ChatHandler;
  code: string;
  message: RegExp;
}

const ndjson =
  (lines: string[]): ChatHandler =>
  async ({ res }) => {
    res.writeHead(200, { 'content-type': 'application/x-ndjson' });
    res.end(lines.map((l) => `${l}\n`).join(''));
  };
const sse =
  (events: string[]): ChatHandler =>
  async ({ res }) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.end(events.map((e) => `data: ${e}\n\n`).join(''));
  };
const ollamaLine = (content: string) =>
  JSON.stringify({
    model: 'm',
    created_at: '2025-05-01T10:00:00Z',
    message: { role: 'assistant', content },
    done: false,
  });
const openaiChunk = (content: string) =>
  JSON.stringify({
    id: 'chatcmpl-1',
    object: 'chat.completion.chunk',
    created: 1,
    model: 'm',
    choices: [{ index: 0, delta: { content }, logprobs: null, finish_reason: null }],
  });

/**
 * The status a device error reaches the client with: the client's own fault (a prompt too long, a
 * model that cannot do what was asked) is a 400, as the runtime itself answers; the rest a 502.
 */
const CLIENT_FAULTS = new Set([
  'context_length_exceeded',
  'unsupported_by_model',
  'upstream_bad_request',
  'invalid_request',
]);
const statusOf = (code: string) => (CLIENT_FAULTS.has(code) ? 400 : code === 'upstream_busy' ? 503 : 502);

const OLLAMA_CASES: ErrorCase[] = [
  {
    name: 'model not found (404)',
    upstream: 'ghost:1b',
    code: 'model_unavailable',
    message: /model 'ghost:1b' not found/,
  },
  {
    name: 'prompt too long (400)',
    upstream: 'small:1b',
    handler: FakeOllama.error(400, "input length (5000 tokens) exceeds the model's context length (4096 tokens)"),
    code: 'context_length_exceeded',
    message: /context length/,
  },
  {
    name: 'runner crash (500)',
    upstream: 'crash:1b',
    handler: FakeOllama.error(500, 'llama runner process has terminated: exit status 2'),
    code: 'upstream_error',
    message: /HTTP 500.*llama runner process has terminated/,
  },
  {
    name: 'model without tool support (400)',
    upstream: 'gemma2:2b',
    handler: FakeOllama.error(400, 'registry.ollama.ai/library/gemma2:2b does not support tools'),
    code: 'unsupported_by_model',
    message: /does not support tools/,
  },
  {
    name: 'malformed NDJSON',
    upstream: 'garbled:1b',
    handler: ndjson([ollamaLine('Hi'), 'this is not json']),
    code: 'upstream_bad_response',
    message: /line 2 is not JSON/,
  },
  {
    name: 'stream cut before its final line',
    upstream: 'cut:1b',
    handler: ndjson([ollamaLine('Hi'), ollamaLine(' there')]),
    code: 'upstream_bad_response',
    message: /ended before its final line/,
  },
  {
    name: 'error line mid-stream',
    upstream: 'midway:1b',
    handler: ndjson([ollamaLine('Hi'), JSON.stringify({ error: 'an error was encountered while running the model' })]),
    code: 'upstream_error',
    message: /mid-answer: an error was encountered/,
  },
];

const OPENAI_CASES: ErrorCase[] = [
  { name: 'model not found (404)', upstream: 'ghost', code: 'model_unavailable', message: /`ghost` does not exist/ },
  {
    name: 'prompt too long (400)',
    upstream: 'small',
    handler: FakeOpenAI.error(
      400,
      "This model's maximum context length is 4096 tokens. However, you requested 5120 tokens (4096 in the messages, 1024 in the completion). Please reduce the length of the messages or completion.",
    ),
    code: 'context_length_exceeded',
    message: /maximum context length is 4096/,
  },
  {
    name: 'llama.cpp context size (400)',
    upstream: 'llamacpp-small',
    handler: async ({ res }) =>
      void res.writeHead(400, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          error: {
            code: 400,
            message: 'the request exceeds the available context size, try increasing it',
            type: 'exceed_context_size_error',
            n_prompt_tokens: 5000,
            n_ctx: 4096,
          },
        }),
      ),
    code: 'context_length_exceeded',
    message: /exceeds the available context size/,
  },
  {
    name: 'API key refused (401)',
    upstream: 'locked',
    handler: FakeOpenAI.error(401, 'Invalid API Key', 'AuthenticationError'),
    code: 'upstream_unauthorized',
    message: /HTTP 401.*Invalid API Key/,
  },
  {
    name: 'server error (503)',
    upstream: 'loading',
    handler: FakeOpenAI.error(503, 'Loading model', 'unavailable_error'),
    code: 'upstream_error',
    message: /HTTP 503.*Loading model/,
  },
  {
    name: 'malformed SSE',
    upstream: 'garbled',
    handler: sse([openaiChunk('Hi'), '{"id": oops']),
    code: 'upstream_bad_response',
    message: /event 2 is not JSON/,
  },
  {
    name: 'error event mid-stream',
    upstream: 'midway',
    handler: sse([
      openaiChunk('Hi'),
      JSON.stringify({ error: { message: 'CUDA error: out of memory', type: 'InternalServerError', code: 500 } }),
    ]),
    code: 'upstream_error',
    message: /CUDA error: out of memory/,
  },
];

/**
 * Each upstream failure ends the task with its own code, reaches the client (502 with the code, or an
 * error event once streaming), is recorded on the task row, and leaves the agent serving.
 */
export function upstreamErrorSuite(backend: 'ollama' | 'openai'): void {
  const cases = backend === 'ollama' ? OLLAMA_CASES : OPENAI_CASES;
  const healthy = backend === 'ollama' ? 'healthy:1b' : 'healthy';
  const midway = backend === 'ollama' ? 'midway:1b' : 'midway';

  describe(`upstream errors (${backend})`, () => {
    let api: Api;
    let dispatcher: Dispatcher;
    let device: Proc;
    let tenant: Tenant;
    const runtime = backend === 'ollama' ? new FakeOllama([healthy]) : new FakeOpenAI([healthy]);
    const upstreams = [...cases.map((c) => c.upstream), healthy];
    const publicIds = new Map(upstreams.map((u) => [u, uniq(`${backend}-${u.replace(':', '-')}`)]));
    const publicId = (upstream: string) => publicIds.get(upstream)!;

    beforeAll(async () => {
      await runtime.start();
      for (const c of cases) {
        if (c.handler) {
          runtime.handlers.set(c.upstream, c.handler);
        }
      }
      runtime.handlers.set(
        healthy,
        backend === 'ollama'
          ? FakeOllama.reply({ content: ['Still', ' here.'] })
          : FakeOpenAI.reply({ choices: [['Still', ' here.']] }),
      );
      [api, dispatcher] = await Promise.all([startApi(), startDispatcher()]);
      tenant = await createTenant([...publicIds.values()]);
      const { token } = await createDevice();
      device = await startRuntimeDevice(dispatcher, token, {
        backend,
        upstream: runtime instanceof FakeOpenAI ? runtime.baseUrl : runtime.url,
        models: upstreams.map((u) => `${publicId(u)}=${u}`),
      });
    });

    afterAll(async () => {
      await Promise.all([device?.stop(), api?.stop(), dispatcher?.stop(), runtime.stop()]);
      await closeDb();
    });

    for (const c of cases) {
      it(`${c.name} → ${statusOf(c.code)} ${c.code}, and the agent serves the next request`, async () => {
        const res = await chat(api, tenant, { model: publicId(c.upstream) });
        expect({ status: res.status, body: res.text }).toEqual(expect.objectContaining({ status: statusOf(c.code) }));
        expect(res.body.error.code).toBe(c.code);
        expect(res.body.error.type).toBe(statusOf(c.code) === 400 ? 'invalid_request_error' : 'server_error');
        expect(res.body.error.message).toMatch(c.message);
        const row = await taskRow(tenant);
        expect(row.status).toBe('failed');
        expect(row.errorCode).toBe(c.code);
        const next = await chat(api, tenant, { model: publicId(healthy) });
        expectStatus(next, 200);
        expect(next.body.choices[0].message.content).toBe('Still here.');
        expect(device.child.exitCode).toBeNull();
      });
    }

    it('streamed: an error after the first tokens is an error event, never [DONE] or a finish_reason', async () => {
      const res = await postSse(completionsUrl(api), tenant.key, {
        model: publicId(midway),
        stream: true,
        messages: [{ role: 'user', content: 'go' }],
      });
      expect(res.status).toBe(200);
      const content = res.events.flatMap((e) => e.choices ?? []).map((c: any) => c.delta?.content ?? '');
      expect(content.join('')).toBe('Hi');
      expect(res.events.at(-1).error.code).toBe('upstream_error');
      expect(res.events).not.toContain('[DONE]');
      expect(res.events.some((e) => e.choices?.some((c: any) => c.finish_reason))).toBe(false);
      const row = await taskRow(tenant);
      expect(row.errorCode).toBe('upstream_error');
      // Output had been relayed: the row keeps its hash.
      expect(row.outputSha256 ?? '').toMatch(/^[0-9a-f]{64}$/);
    });

    it('keeps an explicit --model the runtime lacks announced, and says so in its log', async () => {
      const ghost = backend === 'ollama' ? 'ghost:1b' : 'ghost';
      await device.waitFor(new RegExp(`"upstream_model":"${ghost}".*does not list this model`));
    });
  });
}
