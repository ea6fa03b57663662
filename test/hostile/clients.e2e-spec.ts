import assert from 'node:assert/strict';
import OpenAI from 'openai';
import {
  ADMIN_TOKEN,
  baseEnv,
  closeDb,
  createDevice,
  createTenant,
  db,
  freePort,
  recordsWritten,
  startApi,
  startDevice,
  startDispatcher,
  startNode,
  uniq,
  within,
} from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';
import { assertOpenAIError, bearer, chatBody, jsonHttp, loopbackAddress, rawHttp } from '../reliability/helpers';

/** Small, so that a test can go over it quickly; the defaults are in docs/operations.md. */
const AUTH_FAILURES = 10;
const BODY_LIMIT = 64 * 1024;

/**
 * Hostile clients: keys where they do not belong, floods of wrong keys meant to lock others out, a
 * brute force of the admin token, bodies before authentication and over the limit. What the
 * attacker gets, and what the legitimate tenants keep, is asserted.
 */
describe('hostile clients', () => {
  let api: Api;
  let proxied: Api;
  let dispatcher: Dispatcher;
  let device: Proc;
  const model = uniq('clients');
  let tenant: Tenant;

  beforeAll(async () => {
    const env = { AUTH_FAILURES_PER_MINUTE: String(AUTH_FAILURES), BODY_LIMIT_BYTES: String(BODY_LIMIT) };
    [api, proxied, dispatcher] = await Promise.all([
      startApi(env),
      startApi({ ...env, TRUST_PROXY: 'true' }),
      startDispatcher(),
    ]);
    tenant = await createTenant([model]);
    device = await startDevice(dispatcher, (await createDevice()).token, { models: [model], tokens: 3 });
  });

  afterAll(async () => {
    await device?.stop('SIGKILL');
    await Promise.all([api, proxied, dispatcher].filter(Boolean).map((p) => p.proc.stop('SIGTERM', 3_000)));
    await closeDb();
  });

  /** Task rows are written behind: count once every transition so far is in Postgres. */
  const taskCount = async () => {
    await recordsWritten();
    return db().task.count({ where: { orgId: tenant.org.id } });
  };

  it('an API key in the URL query or in the JSON body is not a credential: 401, nothing served', async () => {
    // An address per request: more failures than AUTH_FAILURES_PER_MINUTE would turn into 429s.
    const before = await taskCount();
    for (const param of ['access_token', 'api_key', 'key', 'apikey']) {
      const url = `${api.url}/v1/chat/completions?${param}=${tenant.key}`;
      assertOpenAIError(
        await jsonHttp('POST', url, chatBody(model, 'hi'), { localAddress: loopbackAddress() }),
        401,
        'invalid_api_key',
      );
      const models = `${api.url}/v1/models?${param}=${tenant.key}`;
      assertOpenAIError(
        await jsonHttp('GET', models, undefined, { localAddress: loopbackAddress() }),
        401,
        'invalid_api_key',
      );
    }
    for (const field of ['access_token', 'api_key', 'key']) {
      const body = { ...chatBody(model, 'hi'), [field]: tenant.key };
      assertOpenAIError(
        await jsonHttp('POST', `${api.url}/v1/chat/completions`, body, { localAddress: loopbackAddress() }),
        401,
        'invalid_api_key',
      );
    }
    assert.equal(await taskCount(), before);
    // The same key in its header works.
    const ok = await jsonHttp('POST', `${api.url}/v1/chat/completions`, chatBody(model, 'hi'), {
      headers: bearer(tenant.key),
      localAddress: loopbackAddress(),
    });
    assert.equal(ok.status, 200, ok.text);
  });

  it('authentication comes before the body: without a valid key, no body is parsed', async () => {
    const from = loopbackAddress();
    // Not JSON, and over the limit: an unauthenticated client gets its 401 either way, not a 400 or 413.
    for (const body of ['{"model": ', 'x'.repeat(BODY_LIMIT * 2)]) {
      const res = await rawHttp('POST', `${api.url}/v1/chat/completions`, {
        headers: { authorization: `Bearer sy_${'Z'.repeat(40)}`, 'content-type': 'application/json' },
        body,
        localAddress: from,
      });
      assertOpenAIError(res, 401, 'invalid_api_key');
    }
    // With the key, the same bodies are judged.
    const bad = await rawHttp('POST', `${api.url}/v1/chat/completions`, {
      headers: { ...bearer(tenant.key), 'content-type': 'application/json' },
      body: '{"model": ',
      localAddress: from,
    });
    assertOpenAIError(bad, 400, 'invalid_json');
  });

  it('a flood of wrong keys from one address: they get 429, while valid keys from that address keep working', async () => {
    const attacker = loopbackAddress();
    const statuses: number[] = [];
    for (let i = 0; i < AUTH_FAILURES * 3; i++) {
      const wrong = `sy_${'W'.repeat(38)}${String(i).padStart(2, '0')}`;
      const res = await jsonHttp('GET', `${api.url}/v1/models`, undefined, {
        headers: bearer(wrong),
        localAddress: attacker,
      });
      statuses.push(res.status);
      if (res.status === 429) {
        assertOpenAIError(res, 429, 'rate_limit_exceeded');
        assert.ok(Number(res.headers['retry-after']) > 0, JSON.stringify(res.headers));
      }
      // A tenant behind the same address (a load balancer, a NAT) is not locked out.
      if (i % 5 === 0) {
        const valid = await jsonHttp('POST', `${api.url}/v1/chat/completions`, chatBody(model, `still works ${i}`), {
          headers: { 'x-api-key': tenant.key },
          localAddress: attacker,
        });
        assert.equal(valid.status, 200, `valid key after ${i} failures: ${valid.text}`);
      }
    }
    expect(statuses.slice(0, AUTH_FAILURES)).toEqual(Array(AUTH_FAILURES).fill(401));
    expect(statuses.slice(AUTH_FAILURES)).toEqual(Array(AUTH_FAILURES * 2).fill(429));
    // Another address is not affected.
    const other = await jsonHttp('GET', `${api.url}/v1/models`, undefined, {
      headers: bearer(`sy_${'V'.repeat(40)}`),
      localAddress: loopbackAddress(),
    });
    assertOpenAIError(other, 401, 'invalid_api_key');
  });

  it('an admin token brute force is limited per address; the real token keeps working', async () => {
    const attacker = loopbackAddress();
    const statuses: number[] = [];
    for (let i = 0; i < AUTH_FAILURES * 2; i++) {
      const guess = `${ADMIN_TOKEN.slice(0, -2)}${String(i).padStart(2, '0')}`;
      const res = await jsonHttp('GET', `${api.url}/admin/orgs`, undefined, {
        headers: bearer(guess),
        localAddress: attacker,
      });
      statuses.push(res.status);
    }
    expect(statuses.slice(0, AUTH_FAILURES)).toEqual(Array(AUTH_FAILURES).fill(401));
    expect(statuses.slice(AUTH_FAILURES)).toEqual(Array(AUTH_FAILURES).fill(429));
    const real = await jsonHttp('GET', `${api.url}/admin/orgs`, undefined, {
      headers: bearer(ADMIN_TOKEN),
      localAddress: attacker,
    });
    assert.equal(real.status, 200, real.text);
    // API key failures and admin failures are counted apart: the tenant's key still works there.
    const key = await jsonHttp('GET', `${api.url}/v1/models`, undefined, {
      headers: bearer(tenant.key),
      localAddress: attacker,
    });
    assert.equal(key.status, 200, key.text);
  });

  it('X-Forwarded-For counts only with TRUST_PROXY: a client cannot dodge the limit by forging it', async () => {
    const attacker = loopbackAddress();
    const statuses: number[] = [];
    for (let i = 0; i <= AUTH_FAILURES; i++) {
      const res = await jsonHttp('GET', `${api.url}/v1/models`, undefined, {
        headers: { ...bearer(`sy_${'X'.repeat(40)}`), 'x-forwarded-for': `203.0.113.${i + 1}` },
        localAddress: attacker,
      });
      statuses.push(res.status);
    }
    assert.equal(statuses.at(-1), 429, `without TRUST_PROXY the forged addresses were believed: ${statuses.join(',')}`);

    // Behind a proxy (TRUST_PROXY=true) the clients' addresses are X-Forwarded-For's: one client's
    // failures do not lock out another client of the same proxy.
    const proxy = loopbackAddress();
    for (let i = 0; i <= AUTH_FAILURES; i++) {
      await jsonHttp('GET', `${proxied.url}/v1/models`, undefined, {
        headers: { ...bearer(`sy_${'Y'.repeat(40)}`), 'x-forwarded-for': '198.51.100.7' },
        localAddress: proxy,
      });
    }
    const blocked = await jsonHttp('GET', `${proxied.url}/v1/models`, undefined, {
      headers: { ...bearer(`sy_${'Y'.repeat(40)}`), 'x-forwarded-for': '198.51.100.7' },
      localAddress: proxy,
    });
    assertOpenAIError(blocked, 429, 'rate_limit_exceeded');
    const neighbour = await jsonHttp('GET', `${proxied.url}/v1/models`, undefined, {
      headers: { ...bearer(`sy_${'Y'.repeat(40)}`), 'x-forwarded-for': '198.51.100.8' },
      localAddress: proxy,
    });
    assertOpenAIError(neighbour, 401, 'invalid_api_key');
  });

  it("a body over BODY_LIMIT_BYTES gets its 413 in Node's fetch and in the openai SDK, not a reset", async () => {
    // Far over the limit (the client is still sending when the answer is ready), as the SDK sends it.
    const content = 'a'.repeat(20 * 1024 * 1024);
    const outcomes: string[] = [];
    for (let i = 0; i < 6; i++) {
      try {
        const res = await fetch(`${api.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { ...bearer(tenant.key), 'content-type': 'application/json' },
          body: JSON.stringify(chatBody(model, content)),
          signal: AbortSignal.timeout(60_000),
        });
        const body: any = await res.json();
        outcomes.push(`${res.status} ${body.error?.code}`);
      } catch (error) {
        outcomes.push(`fetch failed: ${String((error as { cause?: { code?: string } }).cause?.code ?? error)}`);
      }
    }
    const client = new OpenAI({ apiKey: tenant.key, baseURL: `${api.url}/v1`, maxRetries: 0, timeout: 60_000 });
    for (let i = 0; i < 4; i++) {
      try {
        await client.chat.completions.create({ model, messages: [{ role: 'user', content }] });
        outcomes.push('accepted');
      } catch (error) {
        outcomes.push(
          error instanceof OpenAI.APIError && error.status !== undefined
            ? `${error.status} ${String(error.code)}`
            : `sdk failed: ${String(error)}`,
        );
      }
    }
    expect(outcomes).toEqual(Array(10).fill('413 request_too_large'));
  });

  it('with ADMIN_PORT, /admin is served only there, and nothing else is', async () => {
    const adminPort = await freePort();
    const split = await startApi({ ADMIN_PORT: String(adminPort), AUTH_FAILURES_PER_MINUTE: String(AUTH_FAILURES) });
    try {
      const admin = `http://127.0.0.1:${adminPort}`;
      const from = loopbackAddress();
      // On the public port the admin API does not exist, whatever the credentials.
      for (const headers of [bearer(ADMIN_TOKEN), bearer('wrong'), {}]) {
        const res = await jsonHttp('GET', `${split.url}/admin/orgs`, undefined, { headers, localAddress: from });
        assertOpenAIError(res, 404, 'unknown_url');
      }
      const created = await jsonHttp(
        'POST',
        `${split.url}/admin/orgs`,
        { name: uniq('sneaky') },
        {
          headers: bearer(ADMIN_TOKEN),
        },
      );
      assertOpenAIError(created, 404, 'unknown_url');
      // On the admin port: the admin API, with its token and its failed-auth limit.
      const listed = await jsonHttp('GET', `${admin}/admin/orgs`, undefined, { headers: bearer(ADMIN_TOKEN) });
      assert.equal(listed.status, 200, listed.text);
      assertOpenAIError(
        await jsonHttp('GET', `${admin}/admin/orgs`, undefined, { headers: bearer('wrong'), localAddress: from }),
        401,
        'invalid_admin_token',
      );
      // And nothing of the public API there (its health checks aside, for whoever watches that listener).
      for (const path of ['/v1/models', '/metrics']) {
        const res = await jsonHttp('GET', `${admin}${path}`, undefined, { headers: bearer(tenant.key) });
        assertOpenAIError(res, 404, 'unknown_url');
      }
      assert.equal((await jsonHttp('GET', `${admin}/healthz`, undefined)).status, 200);
      const models = await jsonHttp('GET', `${split.url}/v1/models`, undefined, { headers: bearer(tenant.key) });
      assert.equal(models.status, 200, models.text);
    } finally {
      await split.stop();
    }
  });

  it('ADMIN_TOKEN shorter than 32 characters stops the api at start, naming the variable and not the value', async () => {
    const short = 'short-admin-token-123';
    const proc = startNode(
      'apps/api/src/main.js',
      [],
      baseEnv({ API_PORT: String(await freePort()), ADMIN_TOKEN: short }),
    );
    const code = await within(proc.exited, 30_000, 'the api with a short ADMIN_TOKEN to stop').catch(async (e) => {
      await proc.stop('SIGKILL');
      throw e;
    });
    assert.equal(code, 1, proc.output);
    assert.match(proc.stderr, /ADMIN_TOKEN.*at least 32 characters/);
    assert.ok(!proc.output.includes(short), 'the bad token was printed');
  });
});
