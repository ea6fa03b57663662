import {
  cli,
  closeDb,
  createDevice,
  createTenant,
  db,
  http,
  recordsWritten,
  sleep,
  taskCount,
  uniq,
} from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';
import {
  adminAuth,
  assertOllamaError,
  assertOpenAIError,
  bearer,
  chatBody,
  eventually,
  jsonHttp,
  loopbackAddress,
  startApi,
  startDevice,
  startDispatcher,
  stopAll,
  waitStatus,
} from './helpers';
import { expectStatus } from '../support/expect-status';

/**
 * Organization limits (rpm, concurrency, queued per model), enforced across api instances, and the
 * request caps (body size, messages, characters, max tokens, stream duration, failed authentications).
 */
describe('limits and request caps', () => {
  let apiA: Api;
  let apiB: Api;
  /** An api with small caps, also the dedicated instance of the failed-authentication test. */
  let caps: Api;
  let dispatcher: Dispatcher;
  const devices: Proc[] = [];
  const fast = uniq('fast');
  const clamped = uniq('clamped');
  const slow = uniq('slow');
  const streamer = uniq('streamer');

  const BODY_LIMIT = 2048;
  const MAX_MESSAGES = 3;
  const MAX_INPUT_CHARS = 200;
  const MAX_STREAM_MS = 1500;

  beforeAll(async () => {
    [apiA, apiB, caps, dispatcher] = await Promise.all([
      startApi(),
      startApi(),
      startApi({
        BODY_LIMIT_BYTES: String(BODY_LIMIT),
        MAX_MESSAGES: String(MAX_MESSAGES),
        MAX_INPUT_CHARS: String(MAX_INPUT_CHARS),
        MAX_STREAM_MS: String(MAX_STREAM_MS),
      }),
      startDispatcher(),
    ]);
    await db().model.create({ data: { id: clamped, maxOutputTokens: 3, network: true } });
    const tokens = await Promise.all([createDevice(), createDevice(), createDevice()]);
    devices.push(
      ...(await Promise.all([
        startDevice(dispatcher.url, tokens[0].token, { models: [fast, clamped], tokens: 8 }),
        // Busy long enough (4 s to its first token) for a test to see a request wait behind it on a busy machine.
        startDevice(dispatcher.url, tokens[1].token, { models: [slow], ttftMs: 4_000, tokens: 3 }),
        startDevice(dispatcher.url, tokens[2].token, { models: [streamer], tokensPerSecond: 4, tokens: 40 }),
      ])),
    );
  });

  afterAll(async () => {
    await stopAll(devices, [apiA, apiB, caps, dispatcher].filter(Boolean));
    await closeDb();
  });

  const chat = (api: Api, key: string, model: string, content = 'hello', extra: Record<string, unknown> = {}) =>
    http('POST', `${api.url}/v1/chat/completions`, { headers: bearer(key), body: chatBody(model, content, extra) });

  async function setLimits(org: string, limits: Record<string, number | null>) {
    const res = await http('PATCH', `${apiA.url}/admin/orgs/${org}`, { headers: adminAuth, body: limits });
    expectStatus(res, 200);
    return res.body;
  }

  describe('requests per minute', () => {
    it('--rpm 3: the 4th request in the minute gets 429 rate_limit_exceeded with OpenAI headers, across two apis', async () => {
      const tenant = await createTenant([fast]);
      await setLimits(tenant.org.name, { rpm: 3 });
      const remaining: string[] = [];
      for (const [i, api] of [apiA, apiB, apiA].entries()) {
        const res = await chat(api, tenant.key, fast, `request ${i}`);
        expectStatus(res, 200);
        expect(res.headers.get('x-ratelimit-limit-requests')).toBe('3');
        expect(res.headers.get('x-ratelimit-reset-requests') ?? '').toMatch(/^\d+s$/);
        remaining.push(res.headers.get('x-ratelimit-remaining-requests') ?? '');
      }
      expect(remaining).toEqual(['2', '1', '0']);

      const refused = await chat(apiB, tenant.key, fast, 'one too many');
      const error = assertOpenAIError(refused, 429, 'rate_limit_exceeded', null);
      expect(error.message).toMatch(/3 requests per minute/);
      const retryAfter = Number(refused.headers.get('retry-after'));
      expect({
        ok: Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60,
        message: `retry-after ${retryAfter}`,
      }).toEqual(expect.objectContaining({ ok: true }));
      expect(refused.headers.get('x-ratelimit-limit-requests')).toBe('3');
      expect(refused.headers.get('x-ratelimit-remaining-requests')).toBe('0');

      // The other instance refuses too, and the Ollama route answers in its own shape.
      assertOpenAIError(await chat(apiA, tenant.key, fast, 'again'), 429, 'rate_limit_exceeded');
      const ollama = await http('POST', `${apiB.url}/api/chat`, {
        headers: bearer(tenant.key),
        body: { model: fast, stream: false, messages: [{ role: 'user', content: 'hi' }] },
      });
      assertOllamaError(ollama, 429);
      expect(Number(ollama.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      // 429s wrote no task row
      expect(await taskCount(tenant.org.id)).toBe(3);
    });

    it('a burst across two apis: exactly rpm requests get through (the count is atomic in Redis)', async () => {
      const tenant = await createTenant([fast]);
      await setLimits(tenant.org.name, { rpm: 5 });
      const results = await Promise.all(
        Array.from({ length: 12 }, (_, i) => chat(i % 2 === 0 ? apiA : apiB, tenant.key, fast, `burst ${i}`)),
      );
      const statuses = results.map((r) => r.status).sort();
      expect(statuses).toEqual([...Array(5).fill(200), ...Array(7).fill(429)]);
      for (const res of results.filter((r) => r.status === 429)) {
        assertOpenAIError(res, 429, 'rate_limit_exceeded');
      }
      expect(await taskCount(tenant.org.id)).toBe(5);
    });

    it('an org without limits gets no rate-limit headers', async () => {
      const tenant = await createTenant([fast]);
      const res = await chat(apiA, tenant.key, fast);
      expectStatus(res, 200);
      expect(res.headers.get('x-ratelimit-limit-requests')).toBeNull();
    });
  });

  describe('concurrent requests', () => {
    it('--concurrency 1: a second request while one runs gets 429; once it ended, requests are accepted again', async () => {
      const tenant = await createTenant([slow]);
      await setLimits(tenant.org.name, { concurrency: 1 });
      const first = chat(apiA, tenant.key, slow, 'first');
      await waitStatus(tenant.org.id, 'assigned');
      const second = await chat(apiB, tenant.key, slow, 'second');
      const error = assertOpenAIError(second, 429, 'rate_limit_exceeded', null);
      expect(error.message).toMatch(/concurrent/);
      // Retry-After
      expect(Number(second.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      // the 429 wrote no task row
      expect(await taskCount(tenant.org.id)).toBe(1);
      expect((await first).status).toBe(200);
      const third = await chat(apiB, tenant.key, slow, 'third');
      expectStatus(third, 200);
    });
  });

  describe('concurrent requests (burst)', () => {
    it('--concurrency 2 and a burst across two apis: exactly two are taken, the rest get 429', async () => {
      const tenant = await createTenant([slow]);
      await setLimits(tenant.org.name, { concurrency: 2 });
      const results = await Promise.all(
        Array.from({ length: 6 }, (_, i) => chat(i % 2 === 0 ? apiA : apiB, tenant.key, slow, `burst ${i}`)),
      );
      const statuses = results.map((r) => r.status).sort();
      expect(statuses).toEqual([200, 200, 429, 429, 429, 429]);
      expect(await taskCount(tenant.org.id)).toBe(2);
    });
  });

  describe('queued requests per model', () => {
    it('--max-queued 1 with the device busy: the first queues, the second gets 429, other orgs are unaffected', async () => {
      const limited = await createTenant([slow]);
      const other = await createTenant([slow]);
      await setLimits(limited.org.name, { max_queued: 1 });
      const busy = chat(apiA, other.key, slow, 'occupies the device');
      await waitStatus(other.org.id, 'assigned');
      const queued = chat(apiA, limited.key, slow, 'waits in the queue');
      await waitStatus(limited.org.id, 'queued');
      const refused = await chat(apiB, limited.key, slow, 'one too many in the queue');
      const error = assertOpenAIError(refused, 429, 'rate_limit_exceeded', null);
      expect(error.message).toMatch(/queued/);
      expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      // the 429 wrote no task row
      expect(await taskCount(limited.org.id)).toBe(1);
      // Another organization still queues behind it.
      const otherQueued = chat(apiB, other.key, slow, 'another org queues too');
      const results = await Promise.all([busy, queued, otherQueued]);
      for (const res of results) {
        expectStatus(res, 200);
      }
      // Its slot was released when a device took the job: the org may queue again.
      const again = await chat(apiA, limited.key, slow, 'queues again');
      expectStatus(again, 200);
    });
  });

  describe('request caps', () => {
    let tenant: Tenant;
    beforeAll(async () => {
      tenant = await createTenant([fast, clamped, streamer]);
    });

    it(`a body over BODY_LIMIT_BYTES gets 413 request_too_large in each route family's shape`, async () => {
      const big = 'x'.repeat(BODY_LIMIT + 100);
      const openai = await http('POST', `${caps.url}/v1/chat/completions`, {
        headers: bearer(tenant.key),
        body: chatBody(fast, big),
      });
      assertOpenAIError(openai, 413, 'request_too_large');
      const admin = await http('POST', `${caps.url}/admin/orgs`, { headers: adminAuth, body: { name: big } });
      assertOpenAIError(admin, 413, 'request_too_large');
      const ollama = await http('POST', `${caps.url}/api/chat`, {
        headers: bearer(tenant.key),
        body: { model: fast, messages: [{ role: 'user', content: big }] },
      });
      assertOllamaError(ollama, 413);
      expect(await taskCount(tenant.org.id)).toBe(0);
    });

    it('more than MAX_MESSAGES messages: 400 invalid_request with param messages', async () => {
      const messages = Array.from({ length: MAX_MESSAGES + 1 }, (_, i) => ({ role: 'user', content: `m${i}` }));
      const res = await http('POST', `${caps.url}/v1/chat/completions`, {
        headers: bearer(tenant.key),
        body: { model: fast, messages },
      });
      assertOpenAIError(res, 400, 'invalid_request', 'messages');
      const ollama = await http('POST', `${caps.url}/api/chat`, {
        headers: bearer(tenant.key),
        body: { model: fast, stream: false, messages },
      });
      assertOllamaError(ollama, 400);
      const ok = await http('POST', `${caps.url}/v1/chat/completions`, {
        headers: bearer(tenant.key),
        body: { model: fast, messages: messages.slice(0, MAX_MESSAGES) },
      });
      expectStatus(ok, 200);
      expect(await taskCount(tenant.org.id)).toBe(1);
    });

    it('more than MAX_INPUT_CHARS characters of content: 400 invalid_request with param messages', async () => {
      const over = await http('POST', `${caps.url}/v1/chat/completions`, {
        headers: bearer(tenant.key),
        body: {
          model: fast,
          messages: [
            { role: 'system', content: 'a'.repeat(MAX_INPUT_CHARS / 2) },
            { role: 'user', content: [{ type: 'text', text: 'b'.repeat(MAX_INPUT_CHARS / 2 + 1) }] },
          ],
        },
      });
      assertOpenAIError(over, 400, 'invalid_request', 'messages');
      const before = await taskCount(tenant.org.id);
      const exact = await http('POST', `${caps.url}/v1/chat/completions`, {
        headers: bearer(tenant.key),
        body: chatBody(fast, 'c'.repeat(MAX_INPUT_CHARS)),
      });
      expectStatus(exact, 200);
      expect(await taskCount(tenant.org.id)).toBe(before + 1);
    });

    it('over MAX_STREAM_MS with a slow device: 504 stream_timeout and the task ends timed_out', async () => {
      const res = await http('POST', `${caps.url}/v1/chat/completions`, {
        headers: bearer(tenant.key),
        body: chatBody(streamer, 'a slow answer'),
      });
      assertOpenAIError(res, 504, 'stream_timeout');
      const task = await waitStatus(tenant.org.id, 'timed_out');
      expect(task.errorCode).toBe('stream_timeout');
      expect(task.finishedAt).toBeTruthy();

      // Streamed: the error arrives as an event after the output so far, with no [DONE].
      const sse = await fetch(`${caps.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { ...bearer(tenant.key), 'content-type': 'application/json' },
        body: JSON.stringify(chatBody(streamer, 'a slow stream', { stream: true })),
      });
      expect(sse.status).toBe(200);
      const text = await sse.text();
      const last = JSON.parse(text.trim().split('\n').filter(Boolean).at(-1)!.slice('data: '.length));
      expect({ code: last.error.code, text }).toEqual(expect.objectContaining({ code: 'stream_timeout' }));
      expect(last.error.type).toBe('server_error');
      expect(text).not.toMatch(/\[DONE\]/);
      await recordsWritten();
      const rows = await db().task.findMany({ where: { orgId: tenant.org.id, modelId: streamer } });
      expect(rows.length).toBeGreaterThan(0);
      await Promise.all(
        rows.map(async (row) => {
          for (let i = 0; i < 100 && row.status !== 'timed_out'; i++) {
            await sleep(50);
            row = await db().task.findUniqueOrThrow({ where: { id: row.id } });
          }
          expect(row.status).toBe('timed_out');
          expect(row.errorCode).toBe('stream_timeout');
        }),
      );
    });

    it("max tokens are clamped to the model's max_output_tokens, without an error", async () => {
      for (const extra of [{ max_tokens: 100 }, { max_completion_tokens: 50 }, {}]) {
        const res = await chat(apiA, tenant.key, clamped, 'a long answer please', extra);
        expectStatus(res, 200);
        expect({ finish_reason: res.body.choices[0].finish_reason, extra }).toEqual(
          expect.objectContaining({ finish_reason: 'length' }),
        );
        expect({ completion_tokens: res.body.usage.completion_tokens, extra }).toEqual(
          expect.objectContaining({ completion_tokens: 3 }),
        );
      }
      const smaller = await chat(apiA, tenant.key, clamped, 'short', { max_tokens: 2 });
      // a smaller limit is kept
      expect(smaller.body.usage.completion_tokens).toBe(2);
      // A model without max_output_tokens is not clamped.
      const free = await chat(apiA, tenant.key, fast, 'a long answer please', { max_tokens: 100 });
      expect(free.body.usage.completion_tokens).toBe(8);
      expect(free.body.choices[0].finish_reason).toBe('stop');
    });
  });

  describe('failed authentications', () => {
    it('30 failed authentications from one address: the address gets 429 from then on, valid keys included', async () => {
      const tenant = await createTenant([fast]);
      const from = loopbackAddress();
      const url = `${caps.url}/v1/models`;
      const bad = 'sy_' + 'Z'.repeat(40);
      for (let i = 0; i < 30; i++) {
        const res = await jsonHttp('GET', url, undefined, { headers: bearer(bad), localAddress: from });
        assertOpenAIError(res, 401, 'invalid_api_key');
      }
      const blocked = await jsonHttp('GET', url, undefined, { headers: bearer(bad), localAddress: from });
      const error = assertOpenAIError(blocked, 429, 'rate_limit_exceeded');
      expect(error.message).toMatch(/failed authentications/);
      const retryAfter = Number(blocked.headers['retry-after']);
      expect({ ok: retryAfter >= 1 && retryAfter <= 60, message: `retry-after ${retryAfter}` }).toEqual(
        expect.objectContaining({ ok: true }),
      );
      // Another wrong key, or one in the other header: refused the same way.
      const other = await jsonHttp('GET', url, undefined, {
        headers: { 'x-api-key': 'sy_' + 'Y'.repeat(40) },
        localAddress: from,
      });
      assertOpenAIError(other, 429, 'rate_limit_exceeded');
      // The address is refused whole, before any lookup: a valid key from it too, until the window ends
      // (behind a proxy, TRUST_PROXY makes the address the client's own). From elsewhere it is served.
      const valid = await jsonHttp('POST', `${caps.url}/v1/chat/completions`, chatBody(fast, 'hi'), {
        headers: bearer(tenant.key),
        localAddress: from,
      });
      assertOpenAIError(valid, 429, 'rate_limit_exceeded');
      const viaApiKeyHeader = await jsonHttp('GET', url, undefined, {
        headers: { 'x-api-key': tenant.key },
        localAddress: loopbackAddress(),
      });
      expectStatus(viaApiKeyHeader, 200);
      // Counted across the instances: the other api refuses the address's wrong keys too.
      const elsewhere = await jsonHttp('GET', `${apiB.url}/v1/models`, undefined, {
        headers: bearer(bad),
        localAddress: from,
      });
      assertOpenAIError(elsewhere, 429, 'rate_limit_exceeded');
      // And per address: another address with a wrong key still gets the plain 401.
      const fresh = await jsonHttp('GET', url, undefined, { headers: bearer(bad), localAddress: loopbackAddress() });
      assertOpenAIError(fresh, 401, 'invalid_api_key');
      // Public routes stay open to it.
      const health = await jsonHttp('GET', `${caps.url}/healthz`, undefined, { localAddress: from });
      expect(health.status).toBe(200);
    });
  });

  describe('setting limits', () => {
    const row = async (name: string) =>
      db().organization.findUniqueOrThrow({
        where: { name },
        select: { rpmLimit: true, concurrencyLimit: true, maxQueued: true },
      });

    it('CLI `org limits` sets, shows and clears limits (`none`)', async () => {
      const { org } = await createTenant();
      const set = await cli([
        '--json',
        'org',
        'limits',
        org.name,
        '--rpm',
        '5',
        '--concurrency',
        '2',
        '--max-queued',
        '7',
      ]);
      expect({ code: set.code, stderr: set.stderr }).toEqual(expect.objectContaining({ code: 0 }));
      expect(JSON.parse(set.stdout).limits).toEqual({ rpm: 5, concurrency: 2, max_queued: 7 });
      expect(await row(org.name)).toEqual({ rpmLimit: 5, concurrencyLimit: 2, maxQueued: 7 });

      // Without options: shows them (human output too); refused values (run together) change nothing.
      const [show, human, ...refused] = await Promise.all([
        cli(['--json', 'org', 'limits', org.name]),
        cli(['org', 'limits', org.name]),
        cli(['org', 'limits', org.name, '--rpm', '-3']),
        cli(['org', 'limits', org.name, '--concurrency', '1.5']),
        cli(['org', 'limits', org.name, '--max-queued', 'abc']),
      ]);
      expect({ code: show.code, stderr: show.stderr }).toEqual(expect.objectContaining({ code: 0 }));
      expect(JSON.parse(show.stdout).limits).toEqual({ rpm: 5, concurrency: 2, max_queued: 7 });
      expect({ code: human.code, stderr: human.stderr }).toEqual(expect.objectContaining({ code: 0 }));
      expect(human.stdout).toMatch(/limits/);
      for (const res of refused) {
        expect({ code: res.code, message: `accepted: ${res.stdout}` }).not.toEqual(
          expect.objectContaining({ code: 0 }),
        );
      }
      expect(await row(org.name)).toEqual({ rpmLimit: 5, concurrencyLimit: 2, maxQueued: 7 });

      const cleared = await cli(['--json', 'org', 'limits', org.name, '--rpm', 'none']);
      expect({ code: cleared.code, stderr: cleared.stderr }).toEqual(expect.objectContaining({ code: 0 }));
      expect(JSON.parse(cleared.stdout).limits).toEqual({ rpm: null, concurrency: 2, max_queued: 7 });
      const all = await cli(['--json', 'org', 'limits', org.name, '--concurrency', 'none', '--max-queued', 'none']);
      expect({ code: all.code, stderr: all.stderr }).toEqual(expect.objectContaining({ code: 0 }));
      expect(JSON.parse(all.stdout).limits).toEqual({ rpm: null, concurrency: null, max_queued: null });
      expect(await row(org.name)).toEqual({ rpmLimit: null, concurrencyLimit: null, maxQueued: null });

      const missing = await cli(['org', 'limits', uniq('no-such-org'), '--rpm', '3']);
      expect(missing.code).toBe(1);
      expect(missing.stderr).toMatch(/org_not_found/);
      expect(await row(org.name)).toEqual({ rpmLimit: null, concurrencyLimit: null, maxQueued: null });
    });

    it('a limit set with the CLI is enforced, and removing it lifts it', async () => {
      const tenant = await createTenant([fast]);
      expect((await cli(['org', 'limits', tenant.org.name, '--rpm', '1'])).code).toBe(0);
      expect((await chat(apiA, tenant.key, fast)).status).toBe(200);
      assertOpenAIError(await chat(apiB, tenant.key, fast), 429, 'rate_limit_exceeded');
      expect((await cli(['org', 'limits', tenant.org.name, '--rpm', 'none'])).code).toBe(0);
      // Limits are read with the key, whose lookup each instance caches briefly: the lifted limit
      // shows once that has run out (a generous bound for a loaded machine).
      const res = await eventually(
        async () => {
          const answer = await chat(apiB, tenant.key, fast);
          return answer.status === 200 ? answer : null;
        },
        10_000,
        'the lifted limit to take effect',
      );
      expect(res!.headers.get('x-ratelimit-limit-requests')).toBeNull();
    });

    it('PATCH /admin/orgs/{org} sets and clears limits; invalid values change nothing', async () => {
      const { org } = await createTenant();
      const url = `${apiA.url}/admin/orgs/${org.name}`;
      const set = await http('PATCH', url, { headers: adminAuth, body: { rpm: 10, concurrency: 3, max_queued: 4 } });
      expectStatus(set, 200);
      expect(set.body).toEqual({
        id: org.id,
        name: org.name,
        limits: { rpm: 10, concurrency: 3, max_queued: 4 },
        network: true,
        resume: true,
        compat: 'openai',
        weight: 1,
        monthly_token_budget: null,
      });
      const partial = await http('PATCH', url, { headers: adminAuth, body: { concurrency: null } });
      expect(partial.body.limits).toEqual({ rpm: 10, concurrency: null, max_queued: 4 });
      const empty = await http('PATCH', url, { headers: adminAuth, body: {} });
      expectStatus(empty, 200);
      expect(empty.body.limits).toEqual({ rpm: 10, concurrency: null, max_queued: 4 });

      const invalid: unknown[] = [
        { rpm: 0 },
        { rpm: -1 },
        { rpm: 1.5 },
        { rpm: '5' },
        { rpm: 1e10 },
        { concurrency: true },
        { max_queued: [] },
        { extra: 1 },
        [],
        'rpm',
      ];
      for (const body of invalid) {
        const res = await http('PATCH', url, { headers: adminAuth, body });
        assertOpenAIError(res, 400, 'invalid_request');
      }
      expect(await row(org.name)).toEqual({ rpmLimit: 10, concurrencyLimit: null, maxQueued: 4 });
      assertOpenAIError(
        await http('PATCH', `${apiA.url}/admin/orgs/${uniq('nope')}`, { headers: adminAuth, body: { rpm: 1 } }),
        404,
        'org_not_found',
      );
      assertOpenAIError(await http('PATCH', url, { body: { rpm: 1 } }), 401, 'invalid_admin_token');
      const cleared = await http('PATCH', url, { headers: adminAuth, body: { rpm: null, max_queued: null } });
      expect(cleared.body.limits).toEqual({ rpm: null, concurrency: null, max_queued: null });
      expect(await row(org.name)).toEqual({ rpmLimit: null, concurrencyLimit: null, maxQueued: null });
    });
  });
});
