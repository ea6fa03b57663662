import assert from 'node:assert/strict';
import { Ollama } from 'ollama';
import {
  closeDb,
  createDevice,
  createTenant,
  db,
  http,
  startApi,
  startDevice,
  startDispatcher,
  uniq,
  waitTerminal,
  recordsWritten,
} from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';

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
    assert.equal(res.model, model);
    assert.equal(res.message.role, 'assistant');
    assert.ok(res.message.content.length > 0);
    assert.equal(res.done, true);
    assert.equal(res.done_reason, 'stop');
    assert.equal(res.eval_count, 6);
    assert.ok(res.prompt_eval_count >= 1);
    assert.ok(res.total_duration > 0 && res.eval_duration >= 0);
    assert.ok(!Number.isNaN(Date.parse(res.created_at as unknown as string)));
    const extra = res as unknown as { mode: string; task_address: string };
    assert.equal(extra.mode, 'network');
    const row = await waitTerminal(extra.task_address);
    assert.equal(row.api, 'ollama');
    assert.equal(row.stream, false);
    assert.equal(row.status, 'completed');
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
    assert.equal(last.done, true);
    assert.equal(last.done_reason, 'stop');
    assert.equal(last.eval_count, 6);
    assert.match(last.task_address, /^network:/);
    assert.ok(parts.slice(0, -1).every((p) => p.done === false && p.message.role === 'assistant'));
    const streamed = parts.map((p) => p.message.content).join('');
    const whole = await client(tenant.key).chat({ model, messages: [{ role: 'user', content: 'hello' }] });
    assert.equal(streamed, whole.message.content);
    assert.equal((await waitTerminal(last.task_address)).stream, true);
  });

  it('ollama.list shows the org’s enabled models; /api/version is public', async () => {
    const list = await client(tenant.key).list();
    expect(list.models.map((m) => m.name).sort()).toEqual([model, slowModel].sort());
    const entry = list.models.find((m) => m.name === model)!;
    assert.equal(entry.model, model);
    assert.equal(entry.size, 0);
    assert.match(entry.digest, /^[0-9a-f]{64}$/);
    assert.equal((await client(other.key).list()).models.length, 0);
    const version = await http('GET', `${api.url}/api/version`);
    assert.equal(version.status, 200);
    assert.match(version.body.version, /^\d+\.\d+\.\d+$/);
  });

  it('raw NDJSON framing: application/x-ndjson, one object a line, body without a content type', async () => {
    const res = await fetch(`${api.url}/api/chat`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tenant.key}` },
      // As Ollama's curl examples: no Content-Type header (fetch sends text/plain).
      body: JSON.stringify({ model, stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), 'application/x-ndjson');
    const text = await res.text();
    assert.ok(text.endsWith('\n'));
    const lines = text
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l));
    assert.equal(lines.length, 7);
    assert.equal(lines.at(-1).done, true);
  });

  it('maps options, format, think and tools; lists ignored fields in the header', async () => {
    const res = await chat({
      model,
      messages: [{ role: 'user', content: 'weather?' }],
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: {} } } }],
      options: { temperature: 0.2, num_predict: 50, seed: 7, top_k: 40 },
      keep_alive: '5m',
    });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.headers.get('x-switchyard-ignored-params'), 'keep_alive,options.seed,options.top_k');
    assert.equal(res.body.message.tool_calls[0].function.name, 'get_weather');
    assert.equal(typeof res.body.message.tool_calls[0].function.arguments, 'object');

    const json = await chat({ model, format: 'json', messages: [{ role: 'user', content: 'json please' }] });
    assert.equal(json.status, 200);
    assert.equal(typeof JSON.parse(json.body.message.content), 'object');

    const short = await chat({ model, options: { num_predict: 2 }, messages: [{ role: 'user', content: 'x' }] });
    assert.equal(short.body.done_reason, 'length');
    assert.equal(short.body.eval_count, 2);

    const thinking = await chat({ model, think: 'high', messages: [{ role: 'user', content: 'think' }] });
    assert.equal(thinking.status, 200);
    assert.ok(thinking.body.message.thinking.length > 0);
  });

  it('errors are {"error": "..."} with the OpenAI routes’ status codes, and write nothing', async () => {
    // Rows of earlier requests are written behind: count once they are all in.
    await recordsWritten();
    const before = await db().task.count({ where: { orgId: tenant.org.id } });
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
      assert.equal(res.status, status, `${JSON.stringify(body)} → ${res.text}`);
      expect(Object.keys(res.body)).toEqual(['error']);
      assert.equal(typeof res.body.error, 'string');
    }
    const bad = await http('POST', `${api.url}/api/chat`, {
      headers: { authorization: `Bearer ${tenant.key}` },
      raw: '{oops',
    });
    assert.equal(bad.status, 400);
    assert.equal(typeof bad.body.error, 'string');
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
      assert.equal(res.status, 401);
      assert.equal(typeof res.body.error, 'string');
    }
    assert.equal((await http('GET', `${api.url}/api/tags`)).status, 401);
    const unknown = await http('GET', `${api.url}/api/ps`);
    assert.equal(unknown.status, 404);
    assert.equal(typeof unknown.body.error, 'string');
    await recordsWritten();
    assert.equal(await db().task.count({ where: { orgId: tenant.org.id } }), before);
  });

  it('no device online: 503 in Ollama shape', async () => {
    const lonely = uniq('lonely');
    const t = await createTenant([lonely]);
    const res = await chat({ model: lonely, messages: [{ role: 'user', content: 'x' }] }, t.key);
    assert.equal(res.status, 503);
    assert.equal(typeof res.body.error, 'string');
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
    assert.equal(first.done, false);
    controller.abort();
    const task = await db().task.findFirstOrThrow({ where: { orgId: tenant.org.id, modelId: slowModel } });
    const ended = await waitTerminal(task.address);
    assert.equal(ended.status, 'cancelled');
    assert.equal(ended.api, 'ollama');
    await procs[1].waitFor(new RegExp(`"task_address":"${task.address}".*"outcome":"cancelled"`));
  });
});
