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
import { expectStatus } from '../support/expect-status';

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
    expect(task.deviceId).toBe(slow.id);
    // The healthy device is up before the slow one dies, so the requeued job finds it at once.
    const healthy = await device(model, { tokens: 4 });
    slow.proc.child.kill('SIGKILL');
    const res = await pending;
    expectStatus(res, 200);
    expect(res.body.choices[0].finish_reason).toBe('stop');
    const row = await waitTerminal(res.body.task_address);
    expect(row.status).toBe('completed');
    expect(row.deviceId).toBe(healthy.id);
    expect(row.attempts).toBe(2);
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
    expect(res.status).toBe(200);
    const last = res.events.at(-1);
    expect(last.error.code).toBe('device_disconnected');
    expect(res.events).not.toContain('[DONE]');
    expect(res.events.some((e) => e.choices?.some((c: { finish_reason: string }) => c.finish_reason === 'stop'))).toBe(
      false,
    );
    const row = await waitTerminal(res.events[0].task_address);
    expect(row.status).toBe('failed');
    expect(row.errorCode).toBe('device_disconnected');
    expect(row.firstTokenAt).toBeTruthy();
  });

  it('killed after the first token (non-streamed): 502 device_disconnected in the OpenAI error shape', async () => {
    const model = uniq('model');
    const tenant = await createTenant([model]);
    const d = await device(model, { ttftMs: 0, tokensPerSecond: 5, tokens: 100 });
    const pending = chat(tenant, model);
    await waitStatus(tenant.org.id, 'streaming');
    d.proc.child.kill('SIGKILL');
    const res = await pending;
    expect(res.status).toBe(502);
    expect(res.body.error.code).toBe('device_disconnected');
    expect(res.body.error.type).toBe('server_error');
  });

  it('no device online for the model: 503 no_device_available at once, nothing queued', async () => {
    const model = uniq('model');
    const tenant = await createTenant([model]);
    const res = await chat(tenant, model);
    expect(res.status).toBe(503);
    expect(res.body.error.code).toBe('no_device_available');
    expect(await taskCount(tenant.org.id)).toBe(0);
  });

  it('every device busy past QUEUE_TIMEOUT_MS: 503 queue_timeout and the task ends timed_out', async () => {
    const model = uniq('model');
    const tenant = await createTenant([model]);
    await device(model, { ttftMs: 6_000, tokens: 2 });
    const busy = chat(tenant, model);
    await new Promise((r) => setTimeout(r, 300));
    const client = new OpenAI({ apiKey: tenant.key, baseURL: `${api.url}/v1`, maxRetries: 0 });
    await expect(
      client.chat.completions.create({ model, messages: [{ role: 'user', content: 'waiting' }] }),
    ).rejects.toMatchObject({ status: 503, code: 'queue_timeout' });
    await recordsWritten();
    const timedOut = await db().task.findFirstOrThrow({ where: { orgId: tenant.org.id, status: 'timed_out' } });
    expect(timedOut.errorCode).toBe('queue_timeout');
    expect(timedOut.deviceId).toBeNull();
    expect((await busy).status).toBe(200);
  });

  it('a revoked device is disconnected and refused when it reconnects', async () => {
    const model = uniq('model');
    const tenant = await createTenant([model]);
    const d = await device(model, { tokens: 2 });
    expect((await chat(tenant, model)).status).toBe(200);
    await db().device.update({ where: { id: d.id }, data: { revokedAt: new Date() } });
    expect(await d.proc.exited).toBe(1);
    expect(d.proc.output).toMatch(/device token refused/);
    const res = await chat(tenant, model);
    expect(res.status).toBe(503);
    expect(res.body.error.code).toBe('no_device_available');
  });
});
