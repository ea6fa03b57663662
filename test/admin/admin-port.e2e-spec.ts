import { ADMIN_TOKEN, closeDb, createTenant, freePort, http, startApi, uniq } from '../support/stack';
import type { Api, Tenant } from '../support/stack';
import { assertOpenAIError } from '../foundation/helpers';
import { expectStatus } from '../support/expect-status';

/**
 * ADMIN_PORT (issue 12): with it set, the admin API answers only on the admin listener (ADMIN_HOST,
 * loopback by default), and the public port answers /admin like any unknown URL, whatever the token.
 */
describe('ADMIN_PORT: the admin API on its own listener', () => {
  let api: Api;
  let adminUrl: string;
  let tenant: Tenant;
  const auth = { authorization: `Bearer ${ADMIN_TOKEN}` };

  beforeAll(async () => {
    tenant = await createTenant([]);
    const adminPort = await freePort();
    api = await startApi({ ADMIN_PORT: String(adminPort), ADMIN_HOST: '127.0.0.1' });
    adminUrl = `http://127.0.0.1:${adminPort}`;
  });

  afterAll(async () => {
    await api?.stop();
    await closeDb();
  });

  test('the admin listener serves /admin, with the admin token', async () => {
    const orgs = await http('GET', `${adminUrl}/admin/orgs`, { headers: auth });
    expectStatus(orgs, 200);
    expect(orgs.body.data.some((o: { name: string }) => o.name === tenant.org.name)).toBe(true);
    const created = await http('POST', `${adminUrl}/admin/orgs`, {
      headers: auth,
      body: { name: `${tenant.org.name}-2` },
    });
    expectStatus(created, 201);
    assertOpenAIError(await http('GET', `${adminUrl}/admin/orgs`), 401, 'invalid_admin_token');
    expect((await http('GET', `${adminUrl}/healthz`)).status).toBe(200);
  });

  test('the public port answers 404 unknown_url for /admin, as for any unknown URL, token or not', async () => {
    // A name no other suite creates (the fuzz suite's org names can be any short name, "x" included).
    const orgName = uniq('not-created');
    const unknown = await http('GET', `${api.url}/no-such-route`);
    for (const [method, path] of [
      ['GET', '/admin/orgs'],
      ['POST', '/admin/orgs'],
      ['GET', '/admin/devices'],
      ['DELETE', `/admin/keys/${tenant.keyId}`],
      ['GET', '/admin/queues'],
    ]) {
      for (const headers of [auth, {}]) {
        const res = await http(method, `${api.url}${path}`, {
          headers,
          body: method === 'POST' ? { name: orgName } : undefined,
        });
        assertOpenAIError(res, 404, 'unknown_url', null);
        expect(res.body.error.message).toEqual(unknown.body.error.message);
      }
    }
    // Nothing was done: the key still works, the org was not created.
    const models = await http('GET', `${api.url}/v1/models`, { headers: { authorization: `Bearer ${tenant.key}` } });
    expectStatus(models, 200);
    const orgs = await http('GET', `${adminUrl}/admin/orgs`, { headers: auth });
    expect(orgs.body.data.map((o: { name: string }) => o.name)).not.toContain(orgName);
  });

  test('the dashboard lives on the admin listener only', async () => {
    const page = await fetch(`${adminUrl}/dashboard`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type') ?? '').toMatch(/text\/html/);
    assertOpenAIError(await http('GET', `${api.url}/dashboard`), 404, 'unknown_url', null);
  });

  test('the admin listener serves nothing of the public API', async () => {
    const res = await http('GET', `${adminUrl}/v1/models`, { headers: { authorization: `Bearer ${tenant.key}` } });
    assertOpenAIError(res, 404, 'unknown_url');
  });
});
