import assert from 'node:assert/strict';
import OpenAI from 'openai';
import {
  closeDb,
  createDevice,
  createTenant,
  db,
  http,
  recordsWritten,
  startApi,
  startDevice,
  startDispatcher,
  taskCount,
  uniq,
  waitTerminal,
} from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';
import { postSse } from '../support/sse';
import { waitStatus } from '../reliability/helpers';

/** Devices that die: before the first token the job moves to another device; after it, the client is told. */
describe('device failures', () => {
  let api: Api;
  let dispatcher: Dispatcher;
  const procs: Proc[] = [];

  beforeAll(async () => {
    [api, dispatcher] = await Promise.all([startApi({ QUEUE_TIMEOUT_MS: '2000' }), startDispatcher()]);
  });

  afterAll(async () => {
    await Promise.all([...procs.map((p) => p.stop('SIGKILL')), api?.stop(), dispatcher?.stop()]);
    await closeDb();
  });

  async function device(model: string, opts: { ttftMs?: number; tokensPerSecond?: number; tokens?: number } = {}) {
    const { id, token } = await createDevice();
    const proc = await startDevice(dispatcher, token, { models: [model], ...opts });
    procs.push(proc);
    return { id, token, proc };
  }

  const chat = (tenant: Tenant, model: string, extra: object = {}) =>
    http('POST', `${api.url}/v1/chat/completions`, {
      headers: { authorization: `Bearer ${tenant.key}` },
      body: { model, messages: [{ role: 'user', content: 'tell me' }], ...extra },
    });

  it('killed before the first token: the job goes to another device and completes', async () => {
    const model = uniq('model');
    const tenant = await createTenant([model]);
    const slow = await device(model, { ttftMs: 30_000, tokens: 4 });
    const pending = chat(tenant, model);
    // Make sure the task is on the slow device, then kill it and bring up a healthy one.
    const task = await waitStatus(tenant.org.id, 'assigned');
    assert.equal(task.deviceId, slow.id);
    // The healthy device is up before the slow one dies, so the requeued job finds it at once.
    const healthy = await device(model, { tokens: 4 });
    slow.proc.child.kill('SIGKILL');
    const res = await pending;
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.choices[0].finish_reason, 'stop');
    const row = await waitTerminal(res.body.task_address);
    assert.equal(row.status, 'completed');
    assert.equal(row.deviceId, healthy.id);
    assert.equal(row.attempts, 2);
  });

  it('killed after the first token (streamed): an explicit error event, never [DONE] or finish_reason stop', async () => {
    const model = uniq('model');
    const tenant = await createTenant([model]);
    const d = await device(model, { ttftMs: 0, tokensPerSecond: 5, tokens: 100 });
    const pending = postSse(`${api.url}/v1/chat/completions`, tenant.key, {
      model,
      stream: true,
      messages: [{ role: 'user', content: 'go' }],
    });
    await waitStatus(tenant.org.id, 'streaming');
    d.proc.child.kill('SIGKILL');
    const res = await pending;
    assert.equal(res.status, 200);
    const last = res.events.at(-1);
    assert.equal(last.error.code, 'device_disconnected');
    assert.ok(!res.events.includes('[DONE]'));
    assert.ok(!res.events.some((e) => e.choices?.some((c: { finish_reason: string }) => c.finish_reason === 'stop')));
    const row = await waitTerminal(res.events[0].task_address);
    assert.equal(row.status, 'failed');
    assert.equal(row.errorCode, 'device_disconnected');
    assert.ok(row.firstTokenAt);
  });

  it('killed after the first token (non-streamed): 502 device_disconnected in the OpenAI error shape', async () => {
    const model = uniq('model');
    const tenant = await createTenant([model]);
    const d = await device(model, { ttftMs: 0, tokensPerSecond: 5, tokens: 100 });
    const pending = chat(tenant, model);
    await waitStatus(tenant.org.id, 'streaming');
    d.proc.child.kill('SIGKILL');
    const res = await pending;
    assert.equal(res.status, 502);
    assert.equal(res.body.error.code, 'device_disconnected');
    assert.equal(res.body.error.type, 'server_error');
  });

  it('no device online for the model: 503 no_device_available at once, nothing queued', async () => {
    const model = uniq('model');
    const tenant = await createTenant([model]);
    const res = await chat(tenant, model);
    assert.equal(res.status, 503);
    assert.equal(res.body.error.code, 'no_device_available');
    assert.equal(await taskCount(tenant.org.id), 0);
  });

  it('every device busy past QUEUE_TIMEOUT_MS: 503 queue_timeout and the task ends timed_out', async () => {
    const model = uniq('model');
    const tenant = await createTenant([model]);
    await device(model, { ttftMs: 6_000, tokens: 2 });
    const busy = chat(tenant, model);
    await new Promise((r) => setTimeout(r, 300));
    const client = new OpenAI({ apiKey: tenant.key, baseURL: `${api.url}/v1`, maxRetries: 0 });
    await assert.rejects(
      client.chat.completions.create({ model, messages: [{ role: 'user', content: 'waiting' }] }),
      (err: InstanceType<typeof OpenAI.APIError>) => err.status === 503 && err.code === 'queue_timeout',
    );
    await recordsWritten();
    const timedOut = await db().task.findFirstOrThrow({ where: { orgId: tenant.org.id, status: 'timed_out' } });
    assert.equal(timedOut.errorCode, 'queue_timeout');
    assert.equal(timedOut.deviceId, null);
    assert.equal((await busy).status, 200);
  });

  it('a revoked device is disconnected and refused when it reconnects', async () => {
    const model = uniq('model');
    const tenant = await createTenant([model]);
    const d = await device(model, { tokens: 2 });
    assert.equal((await chat(tenant, model)).status, 200);
    await db().device.update({ where: { id: d.id }, data: { revokedAt: new Date() } });
    assert.equal(await d.proc.exited, 1);
    assert.match(d.proc.output, /device token refused/);
    const res = await chat(tenant, model);
    assert.equal(res.status, 503);
    assert.equal(res.body.error.code, 'no_device_available');
  });
});
