import { createHash } from 'node:crypto';
import { AdminService } from '@app/common';
import { FakeDevice } from '../../support/fake-device';
import { postSse } from '../../support/sse';
import {
  createDevice,
  createTenant,
  db,
  http,
  recordsWritten,
  sleep,
  uniq,
  waitOnline,
  waitTerminal,
} from '../../support/stack';
import type { Tenant } from '../../support/stack';
import { relayApps } from '../support/apps';

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/**
 * The api's relay: a request becomes a task row and a job, the dispatcher hands it to a device, and
 * what the device sends comes back to the client; and the api's own endings (queue timeout, idle
 * device, client gone). The api and the dispatcher run in this process on the real Postgres and
 * Redis; devices are socket.io clients written by hand.
 */
describe('relay (api)', () => {
  const timeouts = {
    QUEUE_TIMEOUT_MS: '1500',
    TASK_IDLE_TIMEOUT_MS: '3000',
    ASSIGN_ACK_TIMEOUT_MS: '1000',
    LOG_LEVEL: process.env.DEBUG_LOG ?? 'silent',
  };
  const apps = relayApps(timeouts);
  const { devices } = apps;

  /** A tenant with a model of its own (max 100 output tokens) served by `count` fake network devices. */
  async function fixture(count = 1, opts: { features?: string[] } = {}) {
    const model = uniq('medium-relay');
    await new AdminService(db()).addModel({ id: model, maxOutputTokens: 100, network: true });
    const tenant = await createTenant([model]);
    const fakes: FakeDevice[] = [];
    for (let i = 0; i < count; i++) {
      const { token } = await createDevice();
      const fake = await FakeDevice.connect(apps.dispatcher.url, token, [model], opts);
      devices.push(fake);
      fakes.push(fake);
      await waitOnline([model], token);
    }
    return { model, tenant, fakes };
  }

  const chat = (tenant: Tenant, body: object, signal?: AbortSignal) =>
    fetch(`${apps.api.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tenant.key}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal,
    });

  const ask = (model: string, extra: object = {}) => ({
    model,
    messages: [{ role: 'user', content: 'Say hello' }],
    ...extra,
  });

  /**
   * The device's next task is a request sent now: a job still waiting from before (older, in the same
   * organization's line) would have come first.
   */
  async function expectNextIsLater(tenant: Tenant, model: string, fake: FakeDevice): Promise<void> {
    const later = chat(tenant, { model, messages: [{ role: 'user', content: 'a later request' }] });
    const next = await fake.nextAssignment();
    expect(next.params.messages[0].content).toBe('a later request');
    fake.answer(next.task_address, ['later']);
    expect((await later).status).toBe(200);
    expect(fake.assignments).toEqual([]);
  }

  it('a non-streamed request reaches a device with its parameters, and the device answer comes back', async () => {
    const { model, tenant, fakes } = await fixture();
    const pending = chat(tenant, ask(model, { max_tokens: 500, temperature: 0.5 }));
    const assignment = await fakes[0].nextAssignment();
    expect(assignment).toEqual({
      task_address: expect.stringMatching(/^network:[0-9a-f-]{36}$/),
      model,
      attempt: 1,
      params: expect.objectContaining({
        messages: [{ role: 'user', content: 'Say hello' }],
        // Clamped to the model's max_output_tokens.
        max_tokens: 100,
        temperature: 0.5,
      }),
      request_id: expect.any(String),
    });
    fakes[0].answer(assignment.task_address, ['Hello', ' world'], 9);
    const res = await pending;
    expect(res.status).toBe(200);
    const body: any = await res.json();
    expect(body).toMatchObject({
      object: 'chat.completion',
      model,
      mode: 'network',
      task_address: assignment.task_address,
      choices: [{ index: 0, message: { role: 'assistant', content: 'Hello world' }, finish_reason: 'stop' }],
      usage: { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 },
    });
    const row = await waitTerminal(assignment.task_address);
    expect(row).toMatchObject({
      status: 'completed',
      orgId: tenant.org.id,
      apiKeyId: tenant.keyId,
      modelId: model,
      mode: 'network',
      api: 'openai',
      stream: false,
      finishReason: 'stop',
      promptTokens: 9,
      completionTokens: 2,
      attempts: 1,
      outputSha256: sha256('Hello world'),
    });
  });

  it('a streamed request: one SSE chunk per device event, in order, ending in [DONE]', async () => {
    const { model, tenant, fakes } = await fixture();
    const pending = postSse(`${apps.api.url}/v1/chat/completions`, tenant.key, ask(model, { stream: true }));
    const assignment = await fakes[0].nextAssignment();
    fakes[0].answer(assignment.task_address, ['a', 'b', 'c']);
    const sse = await pending;
    expect(sse.status).toBe(200);
    expect(sse.headers.get('content-type')).toMatch(/^text\/event-stream/);
    expect(sse.events.at(-1)).toBe('[DONE]');
    const chunks = sse.events.slice(0, -1);
    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? null)).toEqual(['', 'a', 'b', 'c', null]);
    expect(chunks.at(-1).choices[0].finish_reason).toBe('stop');
    expect(new Set(chunks.map((c) => c.task_address))).toEqual(new Set([assignment.task_address]));
    expect((await waitTerminal(assignment.task_address)).status).toBe('completed');
  });

  it('no device online for the model: 503 no_device_available at once, nothing recorded', async () => {
    const model = uniq('medium-nobody');
    const tenant = await createTenant([model]);
    const res = await chat(tenant, ask(model));
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('5');
    expect(((await res.json()) as any).error).toMatchObject({ code: 'no_device_available', param: 'model' });
    await recordsWritten();
    expect(await db().task.count({ where: { orgId: tenant.org.id } })).toBe(0);
  });

  it('a request that no busy device takes in time: 503 queue_timeout, the row timed_out, the job gone', async () => {
    const { model, tenant, fakes } = await fixture();
    const busy = chat(tenant, ask(model));
    const first = await fakes[0].nextAssignment();
    const res = await chat(tenant, ask(model));
    expect(res.status).toBe(503);
    expect(((await res.json()) as any).error.code).toBe('queue_timeout');
    // Postgres is written behind the transitions: the rows are read once the records are written.
    await recordsWritten();
    const rows = await db().task.findMany({ where: { orgId: tenant.org.id }, orderBy: { queuedAt: 'asc' } });
    // The second waited and timed out in the queue; the first is its device's (still assigned, unless
    // a slow machine let its own silence timeout come first).
    expect([rows[1].status, rows[1].errorCode]).toEqual(['timed_out', 'queue_timeout']);
    expect([
      ['assigned', null],
      ['timed_out', 'device_timeout'],
    ]).toContainEqual([rows[0].status, rows[0].errorCode]);
    // The device finishes its task and is not handed the timed-out job afterwards: its next is a later one.
    fakes[0].answer(first.task_address, ['done']);
    expect((await busy).status).toBe(200);
    await expectNextIsLater(tenant, model, fakes[0]);
  });

  it('the client goes away while a device works: the device is told to cancel, the row ends cancelled', async () => {
    const { model, tenant, fakes } = await fixture();
    const controller = new AbortController();
    const pending = chat(tenant, ask(model, { stream: true }), controller.signal).catch((e: Error) => e);
    const assignment = await fakes[0].nextAssignment();
    fakes[0].delta(assignment.task_address, 0, 'partial');
    await sleep(100);
    controller.abort();
    await pending;
    const row = await waitTerminal(assignment.task_address);
    expect([row.status, row.errorCode]).toEqual(['cancelled', 'client_disconnected']);
    for (let i = 0; i < 100 && !fakes[0].cancels.includes(assignment.task_address); i++) {
      await sleep(50);
    }
    expect(fakes[0].cancels).toContain(assignment.task_address);
  });

  it('the client goes away while its request waits: the job is withdrawn and never assigned', async () => {
    const { model, tenant, fakes } = await fixture();
    const busy = chat(tenant, ask(model));
    const first = await fakes[0].nextAssignment();
    const controller = new AbortController();
    const waiting = chat(tenant, ask(model), controller.signal).catch((e: Error) => e);
    for (let i = 0; i < 100 && (await db().task.count({ where: { orgId: tenant.org.id } })) < 2; i++) {
      await sleep(20);
    }
    controller.abort();
    await waiting;
    const rows = await db().task.findMany({ where: { orgId: tenant.org.id }, orderBy: { queuedAt: 'asc' } });
    const cancelled = await waitTerminal(rows[1].address);
    expect([cancelled.status, cancelled.errorCode]).toEqual(['cancelled', 'client_disconnected']);
    fakes[0].answer(first.task_address, ['ok']);
    expect((await busy).status).toBe(200);
    await expectNextIsLater(tenant, model, fakes[0]);
  });

  it("a device's error reaches the client with the status of its code", async () => {
    const { model, tenant, fakes } = await fixture();
    const pending = chat(tenant, ask(model));
    const assignment = await fakes[0].nextAssignment();
    fakes[0].error(assignment.task_address, 0, 'context_length_exceeded', 'the prompt is too long');
    const res = await pending;
    expect(res.status).toBe(400);
    const { error }: any = await res.json();
    expect(error.code).toBe('context_length_exceeded');
    expect(error.message).toMatch(/the prompt is too long/);
    const row = await waitTerminal(assignment.task_address);
    expect([row.status, row.errorCode]).toEqual(['failed', 'context_length_exceeded']);
  });

  it('a device that drops before any output: another device takes the task (attempt 2)', async () => {
    const { model, tenant, fakes } = await fixture(2);
    const pending = chat(tenant, ask(model));
    const [gone, first] = await FakeDevice.firstAssigned(fakes);
    const second = fakes.find((d) => d !== gone)!;
    gone.close();
    const retry = await second.nextAssignment();
    expect(retry.task_address).toBe(first.task_address);
    expect(retry.attempt).toBe(2);
    second.answer(retry.task_address, ['second', ' device']);
    const res = await pending;
    expect(res.status).toBe(200);
    expect(((await res.json()) as any).choices[0].message.content).toBe('second device');
    const row = await waitTerminal(first.task_address);
    expect([row.status, row.attempts]).toEqual(['completed', 2]);
  });

  it('a device that drops after output: the stream ends with an explicit device_disconnected error', async () => {
    const { model, tenant, fakes } = await fixture();
    const pending = postSse(`${apps.api.url}/v1/chat/completions`, tenant.key, ask(model, { stream: true }));
    const assignment = await fakes[0].nextAssignment();
    fakes[0].delta(assignment.task_address, 0, 'half an ans');
    await sleep(200);
    fakes[0].close();
    const sse = await pending;
    expect(sse.status).toBe(200);
    expect(sse.events).not.toContain('[DONE]');
    expect(sse.events.at(-1).error).toMatchObject({ code: 'device_disconnected' });
    const row = await waitTerminal(assignment.task_address);
    expect([row.status, row.errorCode]).toEqual(['failed', 'device_disconnected']);
    expect(row.outputSha256).toBe(sha256('half an ans'));
  });

  it('a device that falls silent: 504 device_timeout after TASK_IDLE_TIMEOUT_MS, and the device is told to stop', async () => {
    const { model, tenant, fakes } = await fixture();
    const pending = chat(tenant, ask(model));
    const assignment = await fakes[0].nextAssignment();
    const res = await pending;
    expect(res.status).toBe(504);
    expect(((await res.json()) as any).error.code).toBe('device_timeout');
    const row = await waitTerminal(assignment.task_address);
    expect([row.status, row.errorCode]).toEqual(['timed_out', 'device_timeout']);
    for (let i = 0; i < 100 && !fakes[0].cancels.includes(assignment.task_address); i++) {
      await sleep(50);
    }
    expect(fakes[0].cancels).toContain(assignment.task_address);
  });

  it('GET /v1/tasks/{address} answers for the task while it is in flight and after', async () => {
    const { model, tenant, fakes } = await fixture();
    const pending = chat(tenant, ask(model));
    const assignment = await fakes[0].nextAssignment();
    const url = `${apps.api.url}/v1/tasks/${assignment.task_address}`;
    const during = await http('GET', url, { headers: { authorization: `Bearer ${tenant.key}` } });
    expect(during.status).toBe(200);
    expect(during.body).toMatchObject({ task_address: assignment.task_address, model, kind: 'chat' });
    expect(['queued', 'assigned']).toContain(during.body.status);
    fakes[0].answer(assignment.task_address, ['x']);
    expect((await pending).status).toBe(200);
    await waitTerminal(assignment.task_address);
    const after = await http('GET', url, { headers: { authorization: `Bearer ${tenant.key}` } });
    expect(after.body).toMatchObject({ status: 'completed', kind: 'chat' });
    const other = await createTenant([model]);
    const foreign = await http('GET', url, { headers: { authorization: `Bearer ${other.key}` } });
    expect(foreign.status).toBe(404);
  });
});
