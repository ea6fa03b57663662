import { queueName } from '@app/common';
import { closeDb, createDevice, createTenant, db, http, recordsWritten, uniq } from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';
import {
  LiveStream,
  adminAuth,
  assertOpenAIError,
  bearer,
  chatBody,
  eventually,
  jsonHttp,
  loopbackAddress,
  metricValue,
  sseContent,
  startApi,
  startDevice,
  startDispatcher,
  stopAll,
  waitStatus,
  waitTasks,
} from './helpers';
import { expectStatus } from '../support/expect-status';

/** Waits for a process to exit on its own (no SIGKILL) and returns its exit code and how long it took. */
async function exitOf(
  proc: Proc,
  timeoutMs: number,
): Promise<{ code: number | null; signal: string | null; ms: number }> {
  const started = Date.now();
  let timer: NodeJS.Timeout | undefined;
  const code = await Promise.race([
    proc.exited,
    new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), timeoutMs))),
  ]);
  clearTimeout(timer);
  if (code === 'timeout') {
    await proc.stop('SIGKILL');
    throw new Error(`the process did not exit within ${timeoutMs} ms of SIGTERM; output:\n${proc.output.slice(-3000)}`);
  }
  return { code, signal: proc.child.signalCode, ms: Date.now() - started };
}

/** Every line of a Prometheus text exposition is a comment or `name{labels} value`. */
function assertPrometheusText(text: string): void {
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('# HELP ') || line.startsWith('# TYPE ')) {
      continue;
    }
    expect({ line, message: `not Prometheus text: ${line}` }).toEqual(
      expect.objectContaining({
        line: expect.stringMatching(
          /^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? -?([0-9.e+-]+|NaN|\+Inf|-Inf)$/,
        ),
      }),
    );
  }
}

/** Metrics, request ids in logs, and graceful shutdown of api and dispatcher. */
describe('observability and graceful shutdown', () => {
  let api: Api;
  let dispatcher: Dispatcher;
  const devices: Proc[] = [];
  const extraServers: { proc: Proc }[] = [];
  const model = uniq('metered');
  const slowModel = uniq('slow');
  let tenant: Tenant;

  beforeAll(async () => {
    [api, dispatcher] = await Promise.all([startApi(), startDispatcher({ LOG_LEVEL: 'info' })]);
    tenant = await createTenant([model, slowModel]);
    const [d1, d2] = await Promise.all([createDevice(), createDevice()]);
    devices.push(
      ...(await Promise.all([
        startDevice(dispatcher.url, d1.token, { models: [model], tokensPerSecond: 50, tokens: 6 }),
        startDevice(dispatcher.url, d2.token, { models: [slowModel], ttftMs: 1_500, tokens: 2 }),
      ])),
    );
  });

  afterAll(async () => {
    await stopAll(devices, [api, dispatcher, ...extraServers].filter(Boolean));
    await closeDb();
  });

  const chat = (key: string, m: string, content = 'hello', extra: Record<string, unknown> = {}, a: Api = api) =>
    http('POST', `${a.url}/v1/chat/completions`, { headers: bearer(key), body: chatBody(m, content, extra) });

  describe('GET /metrics', () => {
    it('the api and the dispatcher expose the documented series after ok, 4xx, 429 and streamed requests', async () => {
      expect((await chat(tenant.key, model, 'plain')).status).toBe(200);
      const stream = new LiveStream(
        `${api.url}/v1/chat/completions`,
        tenant.key,
        chatBody(model, 'streamed', { stream: true }),
      );
      await stream.done;
      expect(stream.events.at(-1)).toBe('[DONE]');
      assertOpenAIError(await chat(tenant.key, model, 'x', { temperature: 9 }), 400, 'invalid_request');
      assertOpenAIError(await http('GET', `${api.url}/v1/nope`, { headers: bearer(tenant.key) }), 404, 'unknown_url');
      assertOpenAIError(
        await jsonHttp('GET', `${api.url}/v1/models`, undefined, {
          headers: bearer('sy_' + 'N'.repeat(40)),
          localAddress: loopbackAddress(),
        }),
        401,
        'invalid_api_key',
      );
      const limited = await createTenant([model]);
      await http('PATCH', `${api.url}/admin/orgs/${limited.org.name}`, { headers: adminAuth, body: { rpm: 1 } });
      expect((await chat(limited.key, model)).status).toBe(200);
      assertOpenAIError(await chat(limited.key, model), 429, 'rate_limit_exceeded');

      const res = await http('GET', `${api.url}/metrics`);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type') ?? '').toMatch(/^text\/plain; version=0\.0\.4/);
      const text = res.text;
      assertPrometheusText(text);
      const requests = (status: string) =>
        metricValue(text, 'switchyard_http_requests_total', { route: '/v1/chat/completions', status });
      expect({ ok: requests('200') >= 3, message: `200s: ${requests('200')}` }).toEqual(
        expect.objectContaining({ ok: true }),
      );
      expect(requests('400')).toBeGreaterThanOrEqual(1);
      expect(requests('429')).toBeGreaterThanOrEqual(1);
      expect(
        metricValue(text, 'switchyard_http_requests_total', { route: '/v1/models', status: '401' }),
      ).toBeGreaterThanOrEqual(1);
      expect(metricValue(text, 'switchyard_http_requests_total', { status: '404' })).toBeGreaterThanOrEqual(1);
      expect(text).toMatch(/switchyard_http_requests_total\{[^}]*method="POST"/);
      expect(metricValue(text, 'switchyard_queue_wait_seconds_count', { model })).toBeGreaterThanOrEqual(3);
      expect(text).toMatch(
        new RegExp(
          `switchyard_queue_wait_seconds_bucket\\{[^}]*le="\\+Inf"[^}]*model="${model}"|switchyard_queue_wait_seconds_bucket\\{[^}]*model="${model}"[^}]*le="\\+Inf"`,
        ),
      );
      expect(
        metricValue(text, 'switchyard_time_to_first_token_seconds_count', { model, api: 'openai' }),
      ).toBeGreaterThanOrEqual(3);
      expect(metricValue(text, 'switchyard_tokens_per_second_count', { model })).toBeGreaterThanOrEqual(1);
      expect(
        metricValue(text, 'switchyard_tasks_total', { outcome: 'completed', api: 'openai' }),
      ).toBeGreaterThanOrEqual(3);
      expect(metricValue(text, 'switchyard_rate_limit_rejections_total', { kind: 'rpm' })).toBeGreaterThanOrEqual(1);

      const d = await http('GET', `${dispatcher.url}/metrics`);
      expect(d.status).toBe(200);
      assertPrometheusText(d.text);
      expect(metricValue(d.text, 'switchyard_devices_online', { model, pool: 'network' })).toBe(1);
      expect(metricValue(d.text, 'switchyard_devices_online', { model: slowModel, pool: 'network' })).toBe(1);
      expect(metricValue(d.text, 'switchyard_devices_connected')).toBeGreaterThanOrEqual(2);
      expect(
        metricValue(d.text, 'switchyard_queue_depth', { queue: queueName(model, 'network') }),
      ).toBeGreaterThanOrEqual(0);
      expect(metricValue(d.text, 'switchyard_assignments_total', { result: 'accepted' })).toBeGreaterThanOrEqual(3);
      expect(metricValue(d.text, 'switchyard_dispatcher_tasks_total', { outcome: 'completed' })).toBeGreaterThanOrEqual(
        3,
      );
      expect(d.text).toMatch(/# TYPE switchyard_device_invalid_events_total counter/);
    });

    it('switchyard_queue_depth counts the jobs waiting for a busy device', async () => {
      const queue = queueName(slowModel, 'network');
      const pending = [chat(tenant.key, slowModel, 'one'), chat(tenant.key, slowModel, 'two')];
      await waitStatus(tenant.org.id, 'assigned', 15_000, { modelId: slowModel });
      pending.push(chat(tenant.key, slowModel, 'three'));
      await waitTasks(
        { orgId: tenant.org.id, modelId: slowModel, status: 'queued' },
        (rows) => rows.length === 2,
        15_000,
        'two queued tasks',
      );
      await eventually(
        async () =>
          metricValue((await http('GET', `${dispatcher.url}/metrics`)).text, 'switchyard_queue_depth', { queue }) === 2,
        10_000,
        'queue depth 2',
      );
      for (const res of await Promise.all(pending)) {
        expectStatus(res, 200);
      }
      const text = (await http('GET', `${dispatcher.url}/metrics`)).text;
      expect(metricValue(text, 'switchyard_queue_depth', { queue })).toBe(0);
    });
  });

  describe('request ids', () => {
    it("a caller's x-request-id comes back and is in the dispatcher's log line for the task", async () => {
      const requestId = uniq('rel-req');
      const res = await http('POST', `${api.url}/v1/chat/completions`, {
        headers: { ...bearer(tenant.key), 'x-request-id': requestId },
        body: chatBody(model, 'follow me'),
      });
      expectStatus(res, 200);
      expect(res.headers.get('x-request-id')).toBe(requestId);
      const address: string = res.body.task_address;
      await dispatcher.proc.waitFor(
        new RegExp(`"task":"${address}".*"requestId":"${requestId}"|"requestId":"${requestId}".*"task":"${address}"`),
      );
      const lines = dispatcher.proc.output.split('\n').filter((l) => l.includes(requestId));
      for (const line of lines) {
        // a structured JSON log line
        expect(JSON.parse(line).requestId).toBe(requestId);
      }
      // A request id that is not sane is replaced by a fresh one.
      const bad = await http('GET', `${api.url}/healthz`, { headers: { 'x-request-id': 'bad id with spaces' } });
      expect(bad.headers.get('x-request-id') ?? '').toMatch(/^[0-9a-f-]{36}$/);
    });

    it('the request id follows the task to the device log', async () => {
      const requestId = uniq('rel-dev');
      const res = await http('POST', `${api.url}/v1/chat/completions`, {
        headers: { ...bearer(tenant.key), 'x-request-id': requestId },
        body: chatBody(model, 'follow me to the device'),
      });
      expectStatus(res, 200);
      const address: string = res.body.task_address;
      const device = devices[0];
      await device.waitFor(new RegExp(`"task_address":"${address}"`));
      const line = device.output.split('\n').find((l) => l.includes(address) && l.includes('task finished'));
      if (!line) {
        throw new Error(`no task line for ${address}`);
      }
      expect({
        actual: JSON.parse(line).request_id ?? JSON.parse(line).requestId,
        message: `device log line: ${line}`,
      }).toEqual(expect.objectContaining({ actual: requestId }));
    });
  });

  describe('graceful shutdown', () => {
    let streamer: string;
    beforeAll(async () => {
      streamer = uniq('streamer');
      await db().model.create({ data: { id: streamer, network: true } });
      await http('PUT', `${api.url}/admin/orgs/${tenant.org.name}/models/${streamer}`, { headers: adminAuth });
      const d = await createDevice();
      devices.push(await startDevice(dispatcher.url, d.token, { models: [streamer], tokensPerSecond: 8, tokens: 24 }));
    });

    it('SIGTERM on the api during a stream: the stream finishes within SHUTDOWN_GRACE_MS and the api exits 0', async () => {
      const draining = await startApi({ SHUTDOWN_GRACE_MS: '15000' });
      extraServers.push(draining);
      const prompt = 'finish me please';
      const stream = new LiveStream(
        `${draining.url}/v1/chat/completions`,
        tenant.key,
        chatBody(streamer, prompt, { stream: true }),
      );
      await stream.waitFor(/"content":"[^"]+"/);
      draining.proc.child.kill('SIGTERM');
      await stream.done;
      expect(stream.status).toBe(200);
      expect({ actual: stream.events.at(-1), message: stream.text.slice(-300) }).toEqual(
        expect.objectContaining({ actual: '[DONE]' }),
      );
      const exit = await exitOf(draining.proc, 20_000);
      expect({ code: exit.code, message: draining.proc.output.slice(-2000) }).toEqual(
        expect.objectContaining({ code: 0 }),
      );
      const reference = await chat(tenant.key, streamer, prompt);
      expect(sseContent(stream.events)).toBe(reference.body.choices[0].message.content);
      const row = await waitTasks({ address: stream.events[0].task_address }, (r) => r[0]?.status === 'completed');
      expect(row[0].finishReason).toBe('stop');
    });

    it('SIGTERM on the api with SHUTDOWN_GRACE_MS=1000 and a longer stream: an explicit server_shutdown error, rows end', async () => {
      const hasty = await startApi({ SHUTDOWN_GRACE_MS: '1000' });
      extraServers.push(hasty);
      const stream = new LiveStream(
        `${hasty.url}/v1/chat/completions`,
        tenant.key,
        chatBody(streamer, 'too long to wait for', { stream: true }),
      );
      await stream.waitFor(/"content":"[^"]+"/);
      // A second request waits in the queue behind it (non-streamed).
      const queued = chat(tenant.key, streamer, 'queued behind', {}, hasty);
      await waitStatus(tenant.org.id, 'queued', 10_000, { modelId: streamer });
      hasty.proc.child.kill('SIGTERM');
      await stream.done;
      const last = stream.events.at(-1);
      expect({ code: last?.error?.code, message: stream.text.slice(-500) }).toEqual(
        expect.objectContaining({ code: 'server_shutdown' }),
      );
      expect(stream.events).not.toContain('[DONE]');
      assertOpenAIError(await queued, 503, 'server_shutdown');
      const exit = await exitOf(hasty.proc, 15_000);
      expect({ code: exit.code, message: hasty.proc.output.slice(-2000) }).toEqual(
        expect.objectContaining({ code: 0 }),
      );
      const rows = await waitTasks(
        { orgId: tenant.org.id, modelId: streamer, errorCode: 'server_shutdown' },
        (r) => r.length === 2,
      );
      for (const row of rows) {
        expect(row.status).toBe('failed');
        expect(row.finishedAt).toBeTruthy();
      }
      // The device was told to stop and serves the next request at once.
      const next = await chat(tenant.key, streamer, 'next one', { max_tokens: 2 });
      expectStatus(next, 200);
      // docs/api.md (Streaming): an error event carries the type the same error has as an HTTP response.
      expect({ type: last.error.type, message: `error event: ${JSON.stringify(last)}` }).toEqual(
        expect.objectContaining({ type: 'service_unavailable_error' }),
      );
    });

    it('SIGTERM on a dispatcher with devices connected: it exits 0 within the grace period; its tasks end', async () => {
      const leaving = await startDispatcher({ SHUTDOWN_GRACE_MS: '2000' });
      extraServers.push(leaving);
      const longModel = uniq('long');
      const waitModel = uniq('wait');
      for (const id of [longModel, waitModel]) {
        await db().model.create({ data: { id, network: true } });
        await http('PUT', `${api.url}/admin/orgs/${tenant.org.name}/models/${id}`, { headers: adminAuth });
      }
      const [a, b] = await Promise.all([createDevice(), createDevice()]);
      devices.push(
        ...(await Promise.all([
          startDevice(leaving.url, a.token, { models: [longModel], tokensPerSecond: 4, tokens: 60 }),
          startDevice(leaving.url, b.token, { models: [waitModel], ttftMs: 60_000, tokens: 2 }),
        ])),
      );
      const streaming = new LiveStream(
        `${api.url}/v1/chat/completions`,
        tenant.key,
        chatBody(longModel, 'streams on', { stream: true }),
      );
      await streaming.waitFor(/"content":"[^"]+"/);
      const assigned = chat(tenant.key, waitModel, 'no output yet');
      await waitStatus(tenant.org.id, 'assigned', 10_000, { modelId: waitModel });
      leaving.proc.child.kill('SIGTERM');
      const exit = await exitOf(leaving.proc, 12_000);
      expect({ code: exit.code, message: leaving.proc.output.slice(-2000) }).toEqual(
        expect.objectContaining({ code: 0 }),
      );
      await streaming.done;
      expect({ code: streaming.events.at(-1)?.error?.code, message: streaming.text.slice(-400) }).toEqual(
        expect.objectContaining({ code: 'device_disconnected' }),
      );
      const streamed = (
        await waitTasks({ address: streaming.events[0].task_address }, (r) => r[0]?.status === 'failed')
      )[0];
      expect(streamed.errorCode).toBe('device_disconnected');
      // The task without output went back to the queue; a device on the other dispatcher serves it.
      const requeued = await waitStatus(tenant.org.id, 'queued', 10_000, { modelId: waitModel });
      expect(requeued.deviceId).toBeNull();
      const c = await createDevice();
      devices.push(await startDevice(dispatcher.url, c.token, { models: [waitModel], tokens: 2 }));
      const res = await assigned;
      expectStatus(res, 200);
      const done = (await waitTasks({ address: res.body.task_address }, (r) => r[0]?.status === 'completed'))[0];
      expect(done.attempts).toBe(2);
    });
  });

  it('nothing is left non-terminal', async () => {
    await recordsWritten();
    const open = await db().task.findMany({
      where: { orgId: tenant.org.id, status: { in: ['queued', 'assigned', 'streaming'] } },
    });
    expect(open.map((t) => [t.address, t.status])).toEqual([]);
  });
});
