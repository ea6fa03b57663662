import { Ollama } from 'ollama';
import {
  closeDb,
  createDevice,
  createTenant,
  db,
  http,
  startApi,
  startDevice,
  recordsWritten,
  startDispatcher,
  taskCount,
  uniq,
  waitTerminal,
} from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';
import { expectStatus } from '../support/expect-status';

/** Ollama's own clients, with only the host and a key changed. */
describe('Ollama-compatible API', () => {
  let api: Api;
  let dispatcher: Dispatcher;
  let tenant: Tenant;
  let other: Tenant;
  const procs: Proc[] = [];
  const model = `${uniq('llama')}:3b`;
  const slowModel = uniq('slow');

  beforeAll(async () => {
    [api, dispatcher] = await Promise.all([startApi(), startDispatcher()]);
    tenant = await createTenant([model, slowModel]);
    other = await createTenant([]);
    const a = await createDevice();
    const b = await createDevice();
    procs.push(await startDevice(dispatcher, a.token, { models: [model], tokens: 6 }));
    procs.push(
      await startDevice(dispatcher, b.token, { models: [slowModel], ttftMs: 0, tokensPerSecond: 5, tokens: 200 }),
    );
  });

  afterAll(async () => {
    await Promise.all([...procs.map((p) => p.stop('SIGKILL')), api?.stop(), dispatcher?.stop()]);
    await closeDb();
  });

  const client = (key: string, header: 'bearer' | 'x-api-key' = 'bearer') =>
    new Ollama({
      host: api.url,
      headers: header === 'bearer' ? { Authorization: `Bearer ${key}` } : { 'X-API-Key': key },
    });
  const chat = (body: unknown, key = tenant.key) =>
    http('POST', `${api.url}/api/chat`, { headers: { authorization: `Bearer ${key}` }, body });

  it('ollama.chat (not streamed) answers in Ollama shape and records an ollama task', async () => {
    const res = await client(tenant.key).chat({ model, messages: [{ role: 'user', content: 'hello' }] });
    expect(res.model).toBe(model);
    expect(res.message.role).toBe('assistant');
    expect(res.message.content.length).toBeGreaterThan(0);
    expect(res.done).toBe(true);
    expect(res.done_reason).toBe('stop');
    expect(res.eval_count).toBe(6);
    expect(res.prompt_eval_count).toBeGreaterThanOrEqual(1);
    expect(res.total_duration).toBeGreaterThan(0);
    expect(res.eval_duration).toBeGreaterThanOrEqual(0);
    expect(Date.parse(res.created_at as unknown as string)).not.toBeNaN();
    const extra = res as unknown as { mode: string; task_address: string };
    expect(extra.mode).toBe('network');
    const row = await waitTerminal(extra.task_address);
    expect(row.api).toBe('ollama');
    expect(row.stream).toBe(false);
    expect(row.status).toBe('completed');
  });

  it('ollama.chat (not streamed): eval_duration covers the generation, though the answer reached the api whole', async () => {
    // 4 tokens at 5 tokens/s: the first at once, the last about 600 ms later.
    const res = await client(tenant.key).chat({
      model: slowModel,
      messages: [{ role: 'user', content: 'hello' }],
      options: { num_predict: 4 },
    });
    expect(res.eval_count).toBe(4);
    expect(res.eval_duration).toBeGreaterThanOrEqual(500e6);
    expect(res.prompt_eval_duration + res.eval_duration).toBeLessThanOrEqual(res.total_duration);
  });

  it('ollama.chat streamed: content deltas then a final done line with counts, mode and task_address', async () => {
    const parts: any[] = [];
    for await (const part of await client(tenant.key, 'x-api-key').chat({
      model,
      stream: true,
      messages: [{ role: 'user', content: 'hello' }],
    })) {
      parts.push(part);
    }
    const last = parts.at(-1);
    expect(last.done).toBe(true);
    expect(last.done_reason).toBe('stop');
    expect(last.eval_count).toBe(6);
    expect(last.task_address).toMatch(/^network:/);
    expect(parts.slice(0, -1).every((p) => p.done === false && p.message.role === 'assistant')).toBe(true);
    const streamed = parts.map((p) => p.message.content).join('');
    const whole = await client(tenant.key).chat({ model, messages: [{ role: 'user', content: 'hello' }] });
    expect(streamed).toBe(whole.message.content);
    expect((await waitTerminal(last.task_address)).stream).toBe(true);
  });

  it('ollama.list shows the org’s enabled models; /api/version is public', async () => {
    const list = await client(tenant.key).list();
    expect(list.models.map((m) => m.name).sort()).toEqual([model, slowModel].sort());
    const entry = list.models.find((m) => m.name === model)!;
    expect(entry.model).toBe(model);
    expect(entry.size).toBe(0);
    expect(entry.digest).toMatch(/^[0-9a-f]{64}$/);
    expect((await client(other.key).list()).models).toHaveLength(0);
    const version = await http('GET', `${api.url}/api/version`);
    expect(version.status).toBe(200);
    expect(version.body.version).toMatch(/^\d+\.\d+\.\d+$/);
  });

  it('raw NDJSON framing: application/x-ndjson, one object a line, body without a content type', async () => {
    const res = await fetch(`${api.url}/api/chat`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tenant.key}` },
      // As Ollama's curl examples: no Content-Type header (fetch sends text/plain).
      body: JSON.stringify({ model, stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/x-ndjson');
    const text = await res.text();
    expect(text.endsWith('\n')).toBe(true);
    const lines = text
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines).toHaveLength(7);
    expect(lines.at(-1).done).toBe(true);
  });

  it('maps options, format, think and tools; lists ignored fields in the header', async () => {
    const res = await chat({
      model,
      messages: [{ role: 'user', content: 'weather?' }],
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: {} } } }],
      options: { temperature: 0.2, num_predict: 50, seed: 7, top_k: 40 },
      keep_alive: '5m',
    });
    expectStatus(res, 200);
    expect(res.headers.get('x-switchyard-ignored-params')).toBe('keep_alive,options.seed,options.top_k');
    expect(res.body.message.tool_calls[0].function.name).toBe('get_weather');
    expect(typeof res.body.message.tool_calls[0].function.arguments).toBe('object');

    const json = await chat({ model, format: 'json', messages: [{ role: 'user', content: 'json please' }] });
    expect(json.status).toBe(200);
    expect(typeof JSON.parse(json.body.message.content)).toBe('object');

    const short = await chat({ model, options: { num_predict: 2 }, messages: [{ role: 'user', content: 'x' }] });
    expect(short.body.done_reason).toBe('length');
    expect(short.body.eval_count).toBe(2);

    const thinking = await chat({ model, think: 'high', messages: [{ role: 'user', content: 'think' }] });
    expect(thinking.status).toBe(200);
    expect(thinking.body.message.thinking.length > 0).toBe(true);
  });

  it('errors are {"error": "..."} with the OpenAI routes’ status codes, and write nothing', async () => {
    const before = await taskCount(tenant.org.id);
    const cases: [unknown, number, string | null][] = [
      [{ messages: [{ role: 'user', content: 'x' }] }, 400, null],
      [{ model, messages: [] }, 400, null],
      [{ model, messages: [{ role: 'user', content: 'x', images: ['aGk='] }] }, 400, null],
      [{ model, messages: [{ role: 'robot', content: 'x' }] }, 400, null],
      [{ model, messages: [{ role: 'user', content: 'x' }], options: { temperature: 3 } }, 400, null],
      [{ model: 'not-enabled', messages: [{ role: 'user', content: 'x' }] }, 404, null],
      [{ model: uniq('nodevice'), messages: [{ role: 'user', content: 'x' }] }, 404, null],
    ];
    for (const [body, status] of cases) {
      const res = await chat(body);
      expect({ status: res.status, message: `${JSON.stringify(body)} → ${res.text}` }).toEqual(
        expect.objectContaining({ status }),
      );
      expect(Object.keys(res.body)).toEqual(['error']);
      expect(typeof res.body.error).toBe('string');
    }
    const bad = await http('POST', `${api.url}/api/chat`, {
      headers: { authorization: `Bearer ${tenant.key}` },
      raw: '{oops',
    });
    expect(bad.status).toBe(400);
    expect(typeof bad.body.error).toBe('string');
    const headerSets: Record<string, string>[] = [
      {},
      { authorization: 'Bearer sy_unknownunknownunknownunknownunknown1' },
      { 'x-api-key': 'nope' },
    ];
    for (const headers of headerSets) {
      const res = await http('POST', `${api.url}/api/chat`, {
        headers,
        body: { model, messages: [{ role: 'user', content: 'x' }] },
      });
      expect(res.status).toBe(401);
      expect(typeof res.body.error).toBe('string');
    }
    expect((await http('GET', `${api.url}/api/tags`)).status).toBe(401);
    // An Ollama route Switchyard does not serve.
    const unknown = await http('POST', `${api.url}/api/generate`);
    expect(unknown.status).toBe(404);
    expect(typeof unknown.body.error).toBe('string');
    expect(await taskCount(tenant.org.id)).toBe(before);
  });

  it('no device online: 503 in Ollama shape', async () => {
    const lonely = uniq('lonely');
    const t = await createTenant([lonely]);
    const res = await chat({ model: lonely, messages: [{ role: 'user', content: 'x' }] }, t.key);
    expect(res.status).toBe(503);
    expect(typeof res.body.error).toBe('string');
  });

  it('a client that disconnects mid-stream cancels the device, as on the OpenAI route', async () => {
    const controller = new AbortController();
    const res = await fetch(`${api.url}/api/chat`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tenant.key}` },
      body: JSON.stringify({ model: slowModel, stream: true, messages: [{ role: 'user', content: 'long' }] }),
      signal: controller.signal,
    });
    const reader = res.body!.getReader();
    const { value } = await reader.read();
    const first = JSON.parse(new TextDecoder().decode(value).split('\n')[0]);
    expect(first.done).toBe(false);
    controller.abort();
    await recordsWritten();
    const task = await db().task.findFirstOrThrow({
      where: { orgId: tenant.org.id, modelId: slowModel, stream: true },
    });
    const ended = await waitTerminal(task.address);
    expect(ended.status).toBe('cancelled');
    expect(ended.api).toBe('ollama');
    await procs[1].waitFor(new RegExp(`"task_address":"${task.address}".*"outcome":"cancelled"`));
  });
});
