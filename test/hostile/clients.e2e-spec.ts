import { randomBytes } from 'node:crypto';
import OpenAI from 'openai';
import { AdminService } from '@app/common';
import { MIN_REFRESH_INTERVAL_MS } from '@app/common';
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
import {
  assertOllamaError,
  assertOpenAIError,
  bearer,
  chatBody,
  jsonHttp,
  loopbackAddress,
  rawHttp,
} from '../reliability/helpers';
import { PgQueryLog } from './pg-query-log';
import { RawConnection } from './raw-connection';
import { expectStatus } from '../support/expect-status';

/** Small, so that a test can go over it quickly; the defaults are in docs/operations.md. */
const AUTH_FAILURES = 10;
const BODY_LIMIT = 64 * 1024;

/** A key of the right shape that no one was given. */
const randomKey = () =>
  `sy_${randomBytes(48)
    .toString('base64')
    .replace(/[^A-Za-z0-9]/g, '')
    .slice(0, 40)}`;
/** The session cookie a sign-in answer sets, as a Cookie header. */
const sessionCookieOf = (headers: Record<string, unknown>) => String([headers['set-cookie']].flat()[0]).split(';')[0];

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
    expect(await taskCount()).toBe(before);
    // The same key in its header works.
    const ok = await jsonHttp('POST', `${api.url}/v1/chat/completions`, chatBody(model, 'hi'), {
      headers: bearer(tenant.key),
      localAddress: loopbackAddress(),
    });
    expectStatus(ok, 200);
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

  it('a flood of wrong keys from one address: once over the limit the address is refused whole, other addresses are not', async () => {
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
        expect({ ok: Number(res.headers['retry-after']) > 0, headers: res.headers }).toEqual(
          expect.objectContaining({ ok: true }),
        );
      }
    }
    expect(statuses.slice(0, AUTH_FAILURES)).toEqual(Array(AUTH_FAILURES).fill(401));
    expect(statuses.slice(AUTH_FAILURES)).toEqual(Array(AUTH_FAILURES * 2).fill(429));
    // The right key from that address is refused too while the window lasts: a guesser that hits it
    // would not know (see docs/operations.md: behind a proxy, TRUST_PROXY makes the address the client's).
    const valid = await jsonHttp('POST', `${api.url}/v1/chat/completions`, chatBody(model, 'blocked'), {
      headers: { 'x-api-key': tenant.key },
      localAddress: attacker,
    });
    assertOpenAIError(valid, 429, 'rate_limit_exceeded');
    // The same key from another address is served.
    const elsewhere = await jsonHttp('POST', `${api.url}/v1/chat/completions`, chatBody(model, 'served'), {
      headers: { 'x-api-key': tenant.key },
      localAddress: loopbackAddress(),
    });
    expectStatus(elsewhere, 200);
    // Another address is not affected.
    const other = await jsonHttp('GET', `${api.url}/v1/models`, undefined, {
      headers: bearer(`sy_${'V'.repeat(40)}`),
      localAddress: loopbackAddress(),
    });
    assertOpenAIError(other, 401, 'invalid_api_key');
  });

  it('an admin token brute force is limited per address: then the real token is refused from it too', async () => {
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
    assertOpenAIError(real, 429, 'rate_limit_exceeded');
    // Nor through the dashboard's sign-in.
    const signIn = await jsonHttp(
      'POST',
      `${api.url}/dashboard/session`,
      { token: ADMIN_TOKEN },
      { localAddress: attacker },
    );
    assertOpenAIError(signIn, 429, 'rate_limit_exceeded');
    const elsewhere = await jsonHttp('GET', `${api.url}/admin/orgs`, undefined, {
      headers: bearer(ADMIN_TOKEN),
      localAddress: loopbackAddress(),
    });
    expectStatus(elsewhere, 200);
    // API key failures and admin failures are counted apart: the tenant's key still works there.
    const key = await jsonHttp('GET', `${api.url}/v1/models`, undefined, {
      headers: bearer(tenant.key),
      localAddress: attacker,
    });
    expectStatus(key, 200);
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
    expect({
      actual: statuses.at(-1),
      message: `without TRUST_PROXY the forged addresses were believed: ${statuses.join(',')}`,
    }).toEqual(expect.objectContaining({ actual: 429 }));

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
      expectStatus(listed, 200);
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
      expect((await jsonHttp('GET', `${admin}/healthz`, undefined)).status).toBe(200);
      const models = await jsonHttp('GET', `${split.url}/v1/models`, undefined, { headers: bearer(tenant.key) });
      expectStatus(models, 200);
      // The public API document does not tell of the admin surface; the admin listener's does.
      const paths = async (url: string) => {
        const res = await jsonHttp('GET', `${url}/openapi.json`, undefined);
        expectStatus(res, 200);
        return { paths: Object.keys(res.body.paths), text: res.text };
      };
      const open = await paths(split.url);
      expect({ ok: open.paths.includes('/v1/chat/completions'), message: open.paths.join(' ') }).toEqual(
        expect.objectContaining({ ok: true }),
      );
      expect(open.paths.filter((p) => /^\/(admin|dashboard)/.test(p))).toEqual([]);
      // the public document describes the admin token
      expect(open.text).not.toMatch(/ADMIN_TOKEN|adminToken/);
      const internal = await paths(admin);
      expect(internal.paths).toContain('/admin/orgs');
      expect(internal.paths).toContain('/dashboard/session');
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
    expect({ code, output: proc.output }).toEqual(expect.objectContaining({ code: 1 }));
    expect(proc.stderr).toMatch(/ADMIN_TOKEN.*at least 32 characters/);
    // the bad token was printed
    expect(proc.output).not.toContain(short);
  });
  it('anonymous bodies are not read: an unknown URL or a wrong method answers 404 before the body is sent', async () => {
    // Deeply nested JSON, under the body limit: what would cost the api most to parse.
    const declared = BODY_LIMIT - 1024;
    const cases: [string, string, 'openai' | 'ollama'][] = [
      ['POST', '/v1/no-such-route', 'openai'],
      ['PUT', '/v1/chat/completions', 'openai'],
      ['DELETE', '/v1/models', 'openai'],
      ['POST', '/healthz', 'openai'],
      ['PATCH', '/api/no-such-route', 'ollama'],
    ];
    for (const [method, path, family] of cases) {
      const conn = await RawConnection.open(api.url, loopbackAddress());
      try {
        await conn.write(
          `${method} ${path} HTTP/1.1\r\nHost: api\r\nContent-Type: application/json\r\n` +
            `Content-Length: ${declared}\r\n\r\n${'['.repeat(1000)}`,
        );
        // Only the head and 1,000 bytes of the body are sent: the answer comes without the rest.
        const res = await conn.answer(`${method} ${path}: the 404 before the body was sent`);
        if (family === 'ollama') {
          assertOllamaError(res, 404);
        } else {
          assertOpenAIError(res, 404, 'unknown_url');
        }
        // A client that goes on sending is not cut off: the rest is dropped unread, and the connection
        // serves its next request.
        await conn.write('['.repeat(declared - 1000));
        await conn.write('GET /healthz HTTP/1.1\r\nHost: api\r\n\r\n');
        expect((await conn.answer(`${method} ${path}: the next request`)).status).toBe(200);
      } finally {
        conn.destroy();
      }
    }
    // Node's fetch sending 4 MB (over the limit) to an unknown URL gets its 404, not a reset or a 413.
    const res = await fetch(`${api.url}/v1/no-such-route`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '['.repeat(4 * 1024 * 1024),
      signal: AbortSignal.timeout(60_000),
    });
    expect(res.status).toBe(404);
    expect(((await res.json()) as any).error.code).toBe('unknown_url');
  });

  it('the sign-in takes a few KiB and routes that take no body parse none', async () => {
    const from = loopbackAddress();
    // 16 KiB of nesting: under BODY_LIMIT_BYTES, over the sign-in's own limit, so refused unparsed.
    const deep = await rawHttp('POST', `${api.url}/dashboard/session`, {
      headers: { 'content-type': 'application/json' },
      body: `{"token":${'['.repeat(16 * 1024)}`,
      localAddress: from,
    });
    assertOpenAIError(deep, 413, 'request_too_large');
    // A sign-in fits: a wrong token gets 401, the right one a session.
    const wrong = await jsonHttp(
      'POST',
      `${api.url}/dashboard/session`,
      { token: 'x'.repeat(1024) },
      { localAddress: from },
    );
    assertOpenAIError(wrong, 401, 'invalid_admin_token');
    const right = await jsonHttp(
      'POST',
      `${api.url}/dashboard/session`,
      { token: ADMIN_TOKEN },
      { localAddress: from },
    );
    expectStatus(right, 204);
    // Signing out takes no body: one that is not even JSON is dropped unread, and the sign-out done.
    const out = await rawHttp('DELETE', `${api.url}/dashboard/session`, {
      headers: {
        'content-type': 'application/json',
        'content-length': '10',
        cookie: sessionCookieOf(right.headers),
      },
      body: '{"model": ',
      localAddress: from,
    });
    expectStatus(out, 204);
    const after = await jsonHttp('GET', `${api.url}/dashboard/session`, undefined, {
      headers: { cookie: sessionCookieOf(right.headers) },
    });
    expect(after.body).toEqual({ signed_in: false });
  });

  it('a new ADMIN_TOKEN ends the dashboard sessions of the old one; a token’s sessions work on every api', async () => {
    const port = await freePort();
    const from = loopbackAddress();
    let restarted = await startApi({ AUTH_FAILURES_PER_MINUTE: String(AUTH_FAILURES) }, port);
    try {
      const signIn = await jsonHttp(
        'POST',
        `${restarted.url}/dashboard/session`,
        { token: ADMIN_TOKEN },
        { localAddress: from },
      );
      expectStatus(signIn, 204);
      const cookie = sessionCookieOf(signIn.headers);
      const asSession = (url: string, session: string) =>
        jsonHttp('GET', `${url}/admin/orgs`, undefined, { headers: { cookie: session }, localAddress: from });
      expect((await asSession(restarted.url, cookie)).status).toBe(200);
      // Another instance with the same token: the same session.
      expect((await asSession(api.url, cookie)).status).toBe(200);

      await restarted.stop();
      const rotated = `rotated-admin-token-${randomBytes(16).toString('hex')}`;
      restarted = await startApi({ ADMIN_TOKEN: rotated, AUTH_FAILURES_PER_MINUTE: String(AUTH_FAILURES) }, port);
      assertOpenAIError(await asSession(restarted.url, cookie), 401, 'invalid_admin_token');
      const state = await jsonHttp('GET', `${restarted.url}/dashboard/session`, undefined, { headers: { cookie } });
      expect(state.body).toEqual({ signed_in: false });
      // The new token opens sessions of its own, which an instance still on the old token refuses.
      const again = await jsonHttp(
        'POST',
        `${restarted.url}/dashboard/session`,
        { token: rotated },
        { localAddress: from },
      );
      expectStatus(again, 204);
      expect((await asSession(restarted.url, sessionCookieOf(again.headers))).status).toBe(200);
      assertOpenAIError(await asSession(api.url, sessionCookieOf(again.headers)), 401, 'invalid_admin_token');
    } finally {
      await restarted.stop();
    }
  });

  describe('key lookups, counted at the Postgres wire', () => {
    let log: PgQueryLog;
    let counted: Api;
    /** The api's lookup of one key by its hash (api-key.service.ts). */
    const LOOKUP = /WHERE k\.hash = \$1/;
    /** A refresh of the api's set of known keys: the keys created since, or a page of a full load (KnownCredentials). */
    const REFRESH = /FROM api_keys WHERE created_at > \$1|WHERE hash > \$1/;
    /** Any read of the api_keys table (the keys' last_used_at, written behind, is not a read). */
    const ANY_KEY_QUERY = /FROM api_keys/;

    beforeAll(async () => {
      log = await PgQueryLog.start();
      counted = await startApi({ DATABASE_URL: log.url, AUTH_FAILURES_PER_MINUTE: String(AUTH_FAILURES) });
    });

    afterAll(async () => {
      await counted?.stop();
      await log?.stop();
    });

    it('an address over the failed-auth limit is refused before any lookup: its right key gets 429 and no query', async () => {
      // A key this api has never seen: checking it would take a query.
      const fresh = await createTenant([model]);
      const attacker = loopbackAddress();
      for (let i = 0; i < AUTH_FAILURES; i++) {
        const res = await jsonHttp('GET', `${counted.url}/v1/models`, undefined, {
          headers: bearer(randomKey()),
          localAddress: attacker,
        });
        assertOpenAIError(res, 401, 'invalid_api_key');
      }
      const before = log.count(ANY_KEY_QUERY);
      const refused = [
        await jsonHttp('GET', `${counted.url}/v1/models`, undefined, {
          headers: bearer(fresh.key),
          localAddress: attacker,
        }),
        await jsonHttp('POST', `${counted.url}/v1/chat/completions`, chatBody(model, 'hi'), {
          headers: { 'x-api-key': fresh.key },
          localAddress: attacker,
        }),
      ];
      for (let i = 0; i < 20; i++) {
        refused.push(
          await jsonHttp('GET', `${counted.url}/v1/models`, undefined, {
            headers: bearer(randomKey()),
            localAddress: attacker,
          }),
        );
      }
      for (const res of refused) {
        assertOpenAIError(res, 429, 'rate_limit_exceeded');
        expect({ ok: Number(res.headers['retry-after']) >= 1, headers: res.headers }).toEqual(
          expect.objectContaining({ ok: true }),
        );
      }
      expect({
        actual: log.count(ANY_KEY_QUERY),
        message: `queries while blocked: ${log.queries.slice(-5).join(' | ')}`,
      }).toEqual(expect.objectContaining({ actual: before }));
      // The key is good, and looking it up is a query this log sees: from another address it is served.
      const lookups = log.count(LOOKUP);
      const served = await jsonHttp('GET', `${counted.url}/v1/models`, undefined, {
        headers: bearer(fresh.key),
        localAddress: loopbackAddress(),
      });
      expectStatus(served, 200);
      expect(log.count(LOOKUP)).toBe(lookups + 1);
    });

    it('wrong keys cost no query each: a flood of distinct ones makes a few refreshes; a key created meanwhile works at once', async () => {
      const tenantOfNewKey = await createTenant([model]);
      const lookups = log.count(LOOKUP);
      const refreshesBefore = log.count(REFRESH);
      const started = Date.now();
      const statuses: number[] = [];
      let created: { key: string; status: number } | null = null;
      for (let batch = 0; batch < 10; batch++) {
        // 20 at once, 5 from each address: under the failed-auth limit, so each one is checked.
        const addresses = Array.from({ length: 4 }, () => loopbackAddress());
        const sent = Array.from({ length: 20 }, (_, i) =>
          jsonHttp('GET', `${counted.url}/v1/models`, undefined, {
            headers: bearer(randomKey()),
            localAddress: addresses[i % 4],
          }),
        );
        if (batch === 5) {
          // As the CLI does it: straight into Postgres, then used here at once, mid-flood.
          const key = await new AdminService(db()).createKey({ org: tenantOfNewKey.org.name });
          const first = await jsonHttp('GET', `${counted.url}/v1/models`, undefined, {
            headers: bearer(key.key),
            localAddress: loopbackAddress(),
          });
          created = { key: key.key, status: first.status };
        }
        statuses.push(...(await Promise.all(sent)).map((r) => r.status));
      }
      const elapsed = Date.now() - started;
      expect(new Set(statuses)).toEqual(new Set([401]));
      // the key created mid-flood was refused on its first request
      expect(created?.status).toBe(200);
      // One lookup: the new key's. The 200 wrong keys made none.
      expect(log.count(LOOKUP) - lookups).toBe(1);
      // And the refreshes that found the new key are bounded by time, not by the number of wrong keys.
      const refreshes = log.count(REFRESH) - refreshesBefore;
      const bound = Math.ceil(elapsed / MIN_REFRESH_INTERVAL_MS) + 2;
      expect({
        ok: refreshes <= bound,
        message: `${refreshes} refreshes in ${elapsed} ms for 200 wrong keys (bound ${bound})`,
      }).toEqual(expect.objectContaining({ ok: true }));
    });
  });

  it('every answer forbids framing; the dashboard page too', async () => {
    const answers = [
      await jsonHttp('GET', `${api.url}/healthz`, undefined),
      await jsonHttp('GET', `${api.url}/no-such-route`, undefined),
      await jsonHttp('GET', `${api.url}/v1/models`, undefined, { headers: bearer(tenant.key) }),
      await jsonHttp('GET', `${api.url}/dashboard`, undefined),
    ];
    for (const res of answers) {
      expect({ actual: res.headers['x-frame-options'], headers: res.headers }).toEqual(
        expect.objectContaining({ actual: 'DENY' }),
      );
      expect(String(res.headers['content-security-policy'])).toMatch(/frame-ancestors 'none'/);
    }
  });

  it('a client that trickles its headers is disconnected within seconds, not minutes', async () => {
    const conn = await RawConnection.open(api.url, loopbackAddress());
    await conn.write('GET /healthz HTTP/1.1\r\nHost: api\r\n');
    let n = 0;
    const trickle = setInterval(() => void conn.write(`X-Slow-${n++}: y\r\n`), 1_000);
    try {
      // HEADERS_TIMEOUT_MS (10 s) and the 2 s check interval, with room for a busy machine; Node's
      // defaults (60 s and 30 s) are far beyond.
      await conn.closedWithin(40_000);
    } finally {
      clearInterval(trickle);
      conn.destroy();
    }
  });
});
