import { AdminService } from '@app/common';
import { loopbackAddress, rawHttp } from '../../reliability/helpers';
import { ADMIN_TOKEN, closeDb, createTenant, db } from '../../support/stack';
import { startApiApp } from '../support/apps';
import type { InProcessApp } from '../support/apps';
import { routeFamily } from '../../../apps/api/src/common/route-family';
import { ApiKeyService } from '../../../apps/api/src/auth/api-key.service';
import { apiRoutes } from '../support/routes';

/** The api's global guard: which credentials each route takes, and what everything else gets. */
describe('auth guard (api)', () => {
  let api: InProcessApp;

  beforeAll(async () => {
    api = await startApiApp({ AUTH_FAILURES_PER_MINUTE: '5' });
  });

  afterAll(async () => {
    await api?.close();
    await closeDb();
  });

  /**
   * The api counts failed authentications per client address, in Redis, for the whole run: each test
   * sends from a loopback address of its own (see loopbackAddress).
   */
  let from = loopbackAddress();
  beforeEach(() => {
    from = loopbackAddress();
  });

  const call = (method: string, path: string, headers: Record<string, string> = {}) =>
    rawHttp(method, `${api.url}${path}`, {
      headers: { 'content-type': 'application/json', ...headers },
      body: method === 'GET' || method === 'DELETE' ? undefined : '{}',
      localAddress: from,
    });

  it('every route needs credentials unless it is declared public, and the public ones are exactly these', async () => {
    const routes = apiRoutes(api.app);
    expect(routes.length).toBeGreaterThan(20);
    expect(
      routes
        .filter((r) => r.access === 'public')
        .map((r) => `${r.method} ${r.path}`)
        .sort(),
    ).toEqual([
      // The dashboard's page, assets and session routes: signing in is how a browser gets credentials.
      'DELETE /dashboard/session',
      'GET /api/version',
      'GET /dashboard',
      'GET /dashboard/assets/:file',
      'GET /dashboard/session',
      'GET /healthz',
      'GET /metrics',
      'GET /openapi.json',
      'GET /readyz',
      'POST /dashboard/session',
    ]);
    for (const route of routes.filter((r) => r.access !== 'public')) {
      // Each from an address of its own: so many failures from one would be refused with 429.
      from = loopbackAddress();
      const path = route.path.replace(/:[a-z]+/gi, 'x');
      const res = await call(route.method, path);
      const body = res.body;
      expect([`${route.method} ${route.path}`, res.status]).toEqual([`${route.method} ${route.path}`, 401]);
      // Ollama's routes and their OpenGPU alias answer in Ollama's shape, {"error": "..."}.
      const code =
        routeFamily(path) === 'ollama' ? null : route.access === 'admin' ? 'invalid_admin_token' : 'invalid_api_key';
      if (code) {
        expect(body.error.code).toBe(code);
      } else {
        expect(typeof body.error).toBe('string');
      }
    }
  });

  it('an API key works as Bearer and as X-API-Key; unknown, revoked and expired keys get the same 401', async () => {
    const tenant = await createTenant([]);
    for (const headers of [{ authorization: `Bearer ${tenant.key}` }, { 'x-api-key': tenant.key }] as Record<
      string,
      string
    >[]) {
      expect((await call('GET', '/v1/models', headers)).status).toBe(200);
    }
    const admin = new AdminService(db());
    const revoked = await admin.createKey({ org: tenant.org.name });
    await admin.revokeKey(revoked.id);
    const expired = await admin.createKey({ org: tenant.org.name, expiresIn: '1h' });
    await db().apiKey.update({ where: { id: expired.id }, data: { expiresAt: new Date(Date.now() - 1000) } });
    const bodies = new Set<string>();
    for (const key of [revoked.key, expired.key, `sy_${'Q'.repeat(40)}`]) {
      const res = await call('GET', '/v1/models', { authorization: `Bearer ${key}` });
      expect(res.status).toBe(401);
      bodies.add(res.text);
    }
    expect(bodies.size).toBe(1);
  });

  it("the caller a key authenticates carries its organization's switches: network, resume and compat", async () => {
    const keys = api.app.get(ApiKeyService);
    const [plain, keepOne] = await Promise.all([createTenant([]), createTenant([])]);
    // Set before either key is looked up: the api's cache of key lookups has neither yet.
    await new AdminService(db()).setLimits(keepOne.org.name, { network: false, resume: false, compat: 'nodea' });
    expect(await keys.authenticate(plain.key)).toMatchObject({
      orgId: plain.org.id,
      network: true,
      resume: true,
      compat: 'openai',
    });
    expect(await keys.authenticate(keepOne.key)).toMatchObject({
      orgId: keepOne.org.id,
      network: false,
      resume: false,
      compat: 'nodea',
    });
  });

  it('admin routes take the admin token only', async () => {
    const tenant = await createTenant([]);
    expect((await call('GET', '/admin/orgs', { authorization: `Bearer ${ADMIN_TOKEN}` })).status).toBe(200);
    const wrong: Record<string, string>[] = [
      {},
      { authorization: `Bearer ${tenant.key}` },
      { authorization: 'Bearer wrong-admin-token-x' },
    ];
    for (const headers of wrong) {
      const res = await call('GET', '/admin/orgs', headers);
      expect(res.status).toBe(401);
      expect(res.body.error.code).toBe('invalid_admin_token');
    }
    // An API key is not an admin token, and the admin token is not an API key.
    expect((await call('GET', '/v1/models', { authorization: `Bearer ${ADMIN_TOKEN}` })).status).toBe(401);
  });

  it('an address that keeps failing authentication is refused with 429 for unknown keys', async () => {
    for (let i = 0; i < 5; i++) {
      const res = await call('GET', '/v1/models', { authorization: `Bearer sy_${'F'.repeat(39)}${i}` });
      expect(res.status).toBe(401);
    }
    const refused = await call('GET', '/v1/models', { authorization: `Bearer sy_${'G'.repeat(40)}` });
    expect(refused.status).toBe(429);
    expect(refused.body.error.code).toBe('rate_limit_exceeded');
    expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
  });
});
