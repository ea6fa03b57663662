import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { ADMIN_TOKEN, closeDb, createTenant, db, http, startApi, uniq } from '../support/stack';
import type { Api, Tenant } from '../support/stack';
import { jsonHttp, loopbackAddress } from '../reliability/helpers';
import {
  API_KEY_FORMAT,
  DEVICE_TOKEN_FORMAT,
  UUID_FORMAT,
  adminAuth,
  assertOpenAIError,
  insertTask,
  modelPath,
  sha256,
  tableContains,
  stopApis,
} from './helpers';

/** The admin HTTP API: every route's success, its auth, bad input, and not-found answers. */
describe('admin HTTP API', () => {
  let api: Api;
  /** The same api without ADMIN_TOKEN: the admin API is off. */
  let noAdmin: Api;
  let tenant: Tenant;
  const catalogModel = `${uniq('admin')}/Catalog-Model:Q4_0`;

  const admin = (method: string, path: string, body?: unknown, headers: Record<string, string> = adminAuth()) =>
    http(method, `${api.url}${path}`, { headers, body });
  const raw = (method: string, path: string, text: string) =>
    http(method, `${api.url}${path}`, {
      headers: { ...adminAuth(), 'content-type': 'application/json' },
      raw: text,
    });

  const orgCount = (name: string) => db().organization.count({ where: { name } });
  const keyCount = (orgId: string) => db().apiKey.count({ where: { orgId } });
  const modelCount = (id: string) => db().model.count({ where: { id } });
  const deviceCount = (name: string) => db().device.count({ where: { name } });

  beforeAll(async () => {
    tenant = await createTenant([catalogModel]);
    // One after the other: a start is allowed 15 s, and the machine may be small and busy.
    api = await startApi();
    noAdmin = await startApi({ ADMIN_TOKEN: '' });
  });

  afterAll(async () => {
    await stopApis(api, noAdmin);
    await closeDb();
  });

  test('POST /admin/orgs creates an organization; GET /admin/orgs lists it', async () => {
    const name = uniq('admin-org');
    const created = await admin('POST', '/admin/orgs', { name });
    assert.equal(created.status, 201, created.text);
    assert.match(created.body.id, UUID_FORMAT);
    assert.equal(created.body.name, name);
    assert.equal(typeof created.body.created_at, 'string');
    const row = await db().organization.findUniqueOrThrow({ where: { name } });
    assert.equal(row.id, created.body.id);

    const listed = await admin('GET', '/admin/orgs');
    assert.equal(listed.status, 200, listed.text);
    assert.equal(listed.body.object, 'list');
    const entry = listed.body.data.find((o: { name: string }) => o.name === name);
    assert.equal(entry.id, created.body.id);
    assert.equal(entry.created_at, created.body.created_at);
    assert.equal(entry.active_keys, 0);
    assert.equal(entry.models, 0);
    assert.equal(entry.devices, 0);
    expect(entry.limits).toEqual({ rpm: null, concurrency: null, max_queued: null });
    const mine = listed.body.data.find((o: { name: string }) => o.name === tenant.org.name);
    assert.equal(mine.active_keys, 1);
    assert.equal(mine.models, 1);
  });

  test('PATCH /admin/orgs/{org} sets and removes limits', async () => {
    const org = await createTenant([]);
    const path = `/admin/orgs/${org.org.name}`;
    const set = await admin('PATCH', path, { rpm: 60, concurrency: 2 });
    assert.equal(set.status, 200, set.text);
    expect(set.body).toEqual({
      id: org.org.id,
      name: org.org.name,
      limits: { rpm: 60, concurrency: 2, max_queued: null },
      network: true,
      weight: 1,
    });
    // Fields left out keep their value; null removes a limit.
    const cleared = await admin('PATCH', path, { concurrency: null, max_queued: 5 });
    assert.equal(cleared.status, 200, cleared.text);
    expect(cleared.body.limits).toEqual({ rpm: 60, concurrency: null, max_queued: 5 });
    const row = await db().organization.findUniqueOrThrow({ where: { id: org.org.id } });
    expect([row.rpmLimit, row.concurrencyLimit, row.maxQueued]).toEqual([60, null, 5]);
    const listed = (await admin('GET', '/admin/orgs')).body.data.find((o: { id: string }) => o.id === org.org.id);
    expect(listed.limits).toEqual({ rpm: 60, concurrency: null, max_queued: 5 });

    for (const [body, param] of [
      [{ rpm: 0 }, 'rpm'],
      [{ rpm: 'x' }, 'rpm'],
      [{ concurrency: 1.5 }, 'concurrency'],
      [{ max_queued: -1 }, 'max_queued'],
    ] as const) {
      assertOpenAIError(await admin('PATCH', path, body), 400, 'invalid_request', param);
    }
    assertOpenAIError(await admin('PATCH', `/admin/orgs/${uniq('ghost-org')}`, { rpm: 1 }), 404, 'org_not_found');
    const unchanged = await db().organization.findUniqueOrThrow({ where: { id: org.org.id } });
    expect([unchanged.rpmLimit, unchanged.concurrencyLimit, unchanged.maxQueued]).toEqual([60, null, 5]);
  });

  test('a duplicate organization is 409 conflict and writes nothing', async () => {
    const res = await admin('POST', '/admin/orgs', { name: tenant.org.name });
    assertOpenAIError(res, 409, 'conflict', 'name');
    assert.equal(await orgCount(tenant.org.name), 1);
  });

  test('keys: create, list and revoke through /admin', async () => {
    const org = tenant.org.name;
    const created = await admin('POST', `/admin/orgs/${org}/keys`, { label: 'ci', expires_in: '30d' });
    assert.equal(created.status, 201, created.text);
    const { id, key, prefix } = created.body;
    assert.match(id, UUID_FORMAT);
    assert.match(key, API_KEY_FORMAT);
    assert.ok(key.startsWith(prefix));
    assert.equal(created.body.org, org);
    assert.equal(created.body.label, 'ci');
    const expires = Date.parse(created.body.expires_at);
    assert.ok(Math.abs(expires - (Date.now() + 30 * 86_400_000)) < 60_000, `expires_at ${created.body.expires_at}`);
    const row = await db().apiKey.findUniqueOrThrow({ where: { id } });
    assert.equal(row.hash, sha256(key));
    assert.equal(await tableContains('api_keys', key), false);

    // The new key works on the client API.
    const usable = await http('GET', `${api.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
    assert.equal(usable.status, 200, usable.text);

    const listed = await admin('GET', `/admin/orgs/${org}/keys`);
    assert.equal(listed.status, 200, listed.text);
    assert.equal(listed.body.object, 'list');
    assert.ok(!listed.text.includes(key), 'the key list shows the key');
    const entry = listed.body.data.find((k: { id: string }) => k.id === id);
    assert.equal(entry.prefix, prefix);
    assert.equal(entry.status, 'active');
    assert.equal(entry.label, 'ci');
    assert.equal(entry.revoked_at, null);

    const revoked = await admin('DELETE', `/admin/keys/${id}`);
    assert.equal(revoked.status, 200, revoked.text);
    assert.equal(revoked.body.id, id);
    assert.equal(revoked.body.prefix, prefix);
    assert.equal(typeof revoked.body.revoked_at, 'string');
    const later = (await admin('GET', `/admin/orgs/${org}/keys`)).body.data.find((k: { id: string }) => k.id === id);
    assert.equal(later.status, 'revoked');
    assert.equal(later.revoked_at, revoked.body.revoked_at);
    // Revoking again keeps the first revocation.
    const again = await admin('DELETE', `/admin/keys/${id}`);
    assert.equal(again.status, 200, again.text);
    assert.equal(again.body.revoked_at, revoked.body.revoked_at);

    // A key without a body: no label, no expiry.
    const plain = await admin('POST', `/admin/orgs/${org}/keys`);
    assert.equal(plain.status, 201, plain.text);
    assert.equal(plain.body.label, null);
    assert.equal(plain.body.expires_at, null);
  });

  test('models: add, list, enable and disable through /admin', async () => {
    const id = `${uniq('vendor')}/Model-GGUF:Q4_K_M`;
    const added = await admin('POST', '/admin/models', { id, max_output_tokens: 4096, owned_by: 'acme' });
    assert.equal(added.status, 201, added.text);
    expect(added.body).toEqual({
      id,
      max_output_tokens: 4096,
      owned_by: 'acme',
      network: false,
      created_at: added.body.created_at,
    });
    assert.equal(typeof added.body.created_at, 'string');
    const row = await db().model.findUniqueOrThrow({ where: { id } });
    assert.equal(row.maxOutputTokens, 4096);
    assert.equal(row.ownedBy, 'acme');

    assertOpenAIError(await admin('POST', '/admin/models', { id }), 409, 'conflict', 'id');
    assert.equal(await modelCount(id), 1);

    const plainId = uniq('plain-model');
    const plain = await admin('POST', '/admin/models', { id: plainId });
    assert.equal(plain.status, 201, plain.text);
    assert.equal(plain.body.max_output_tokens, null);
    assert.equal(plain.body.owned_by, 'switchyard');

    const find = async (modelId: string) =>
      (await admin('GET', '/admin/models')).body.data.find((m: { id: string }) => m.id === modelId);
    expect((await find(id)).enabled_for).toEqual([]);

    const org = tenant.org.name;
    for (let i = 0; i < 2; i++) {
      // Enabling twice is harmless.
      const enabled = await admin('PUT', `/admin/orgs/${org}/models/${modelPath(id)}`);
      assert.equal(enabled.status, 200, enabled.text);
      expect(enabled.body).toEqual({ model: id, org, enabled: true });
    }
    expect((await find(id)).enabled_for).toEqual([org]);
    assert.equal(await db().orgModel.count({ where: { orgId: tenant.org.id, modelId: id } }), 1);

    const disabled = await admin('DELETE', `/admin/orgs/${org}/models/${modelPath(id)}`);
    assert.equal(disabled.status, 200, disabled.text);
    expect(disabled.body).toEqual({ model: id, org, enabled: false });
    expect((await find(id)).enabled_for).toEqual([]);
    assert.equal(await db().orgModel.count({ where: { orgId: tenant.org.id, modelId: id } }), 0);
  });

  test('models: PATCH changes the fields it is given and no others; a bad body or model changes nothing', async () => {
    const id = `${uniq('patch')}/Model:Q8_0`;
    const added = await admin('POST', '/admin/models', { id, max_output_tokens: 512, network: true });
    assert.equal(added.status, 201, added.text);
    assert.equal(added.body.network, true);

    const off = await admin('PATCH', `/admin/models/${modelPath(id)}`, { network: false });
    assert.equal(off.status, 200, off.text);
    expect(off.body).toMatchObject({ id, max_output_tokens: 512, owned_by: 'switchyard', network: false });
    const unbounded = await admin('PATCH', `/admin/models/${modelPath(id)}`, {
      max_output_tokens: null,
      owned_by: 'x',
    });
    expect(unbounded.body).toMatchObject({ id, max_output_tokens: null, owned_by: 'x', network: false });

    const before = await db().model.findUniqueOrThrow({ where: { id } });
    assertOpenAIError(
      await admin('PATCH', `/admin/models/${modelPath(id)}`, { network: 'on' }),
      400,
      'invalid_request',
    );
    assertOpenAIError(
      await admin('PATCH', `/admin/models/${modelPath(id)}`, { colour: 'red' }),
      400,
      'invalid_request',
    );
    assertOpenAIError(
      await admin('PATCH', `/admin/models/${modelPath(id)}`, { max_output_tokens: 0 }),
      400,
      'invalid_request',
      'max_output_tokens',
    );
    assertOpenAIError(
      await admin('PATCH', `/admin/models/${modelPath(`${id}-nope`)}`, { network: true }),
      404,
      'model_not_found',
      'model',
    );
    expect(await db().model.findUniqueOrThrow({ where: { id } })).toEqual(before);
  });

  test('devices: create (direct and network), list and revoke through /admin', async () => {
    const directName = uniq('dev-direct');
    const networkName = uniq('dev-network');
    const direct = await admin('POST', '/admin/devices', { name: directName, org: tenant.org.name });
    assert.equal(direct.status, 201, direct.text);
    assert.match(direct.body.id, UUID_FORMAT);
    assert.match(direct.body.token, DEVICE_TOKEN_FORMAT);
    assert.equal(direct.body.name, directName);
    assert.equal(direct.body.org, tenant.org.name);
    assert.equal(direct.body.pool, 'direct');
    const network = await admin('POST', '/admin/devices', { name: networkName });
    assert.equal(network.status, 201, network.text);
    assert.equal(network.body.org, null);
    assert.equal(network.body.pool, 'network');

    for (const created of [direct.body, network.body]) {
      const row = await db().device.findUniqueOrThrow({ where: { id: created.id } });
      assert.equal(row.tokenHash, sha256(created.token));
      assert.equal(await tableContains('devices', created.token), false);
    }
    assert.equal((await db().device.findUniqueOrThrow({ where: { id: direct.body.id } })).orgId, tenant.org.id);

    const listed = await admin('GET', '/admin/devices');
    assert.equal(listed.status, 200, listed.text);
    assert.equal(listed.body.object, 'list');
    assert.ok(!listed.text.includes(direct.body.token), 'device list shows a token');
    const entry = listed.body.data.find((d: { id: string }) => d.id === direct.body.id);
    assert.equal(entry.name, directName);
    assert.equal(entry.org, tenant.org.name);
    assert.equal(entry.pool, 'direct');
    assert.equal(entry.status, 'active');
    assert.ok(direct.body.token.startsWith(entry.token_prefix));

    const revoked = await admin('DELETE', `/admin/devices/${network.body.id}`);
    assert.equal(revoked.status, 200, revoked.text);
    assert.equal(revoked.body.id, network.body.id);
    assert.equal(typeof revoked.body.revoked_at, 'string');
    const later = (await admin('GET', '/admin/devices')).body.data.find(
      (d: { id: string }) => d.id === network.body.id,
    );
    assert.equal(later.status, 'revoked');
    assert.ok((await db().device.findUniqueOrThrow({ where: { id: network.body.id } })).revokedAt);
  });

  test('GET /admin/tasks/{task_address} shows a task record', async () => {
    const task = await insertTask(tenant.org.id, catalogModel);
    const res = await admin('GET', `/admin/tasks/${task.address}`);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.object, 'task');
    assert.equal(res.body.task_address, task.address);
    assert.equal(res.body.status, 'completed');
    assert.equal(res.body.model, catalogModel);
    assert.equal(res.body.mode, 'network');
    assert.equal(res.body.api, 'openai');
    assert.equal(res.body.stream, false);
    assert.equal(res.body.org, tenant.org.name);
  });

  test('every admin route is 401 invalid_admin_token without the right token', async () => {
    const newOrg = uniq('unauth-org');
    const newModel = uniq('unauth-model');
    const newDevice = uniq('unauth-dev');
    const routes: [string, string, unknown?][] = [
      ['GET', '/admin/orgs'],
      ['POST', '/admin/orgs', { name: newOrg }],
      ['PATCH', `/admin/orgs/${tenant.org.name}`, { rpm: 1 }],
      ['GET', `/admin/orgs/${tenant.org.name}/keys`],
      ['POST', `/admin/orgs/${tenant.org.name}/keys`, {}],
      ['DELETE', `/admin/keys/${tenant.keyId}`],
      ['GET', '/admin/models'],
      ['POST', '/admin/models', { id: newModel }],
      ['PUT', `/admin/orgs/${tenant.org.name}/models/${modelPath(catalogModel)}`],
      ['DELETE', `/admin/orgs/${tenant.org.name}/models/${modelPath(catalogModel)}`],
      ['GET', '/admin/devices'],
      ['POST', '/admin/devices', { name: newDevice }],
      ['DELETE', `/admin/devices/${randomUUID()}`],
      ['GET', `/admin/tasks/network:${randomUUID()}`],
    ];
    const keysBefore = await keyCount(tenant.org.id);
    const credentials: Record<string, Record<string, string>> = {
      none: {},
      'wrong token': adminAuth('wrong-admin-token-0123456789'),
      'token with a suffix': adminAuth(`${ADMIN_TOKEN}x`),
      'an API key': adminAuth(tenant.key),
      'token in X-API-Key': { 'x-api-key': ADMIN_TOKEN },
    };
    // Each refusal counts against the client's address (too many get 429): one address per request.
    const send = (url: string, method: string, body: unknown, headers: Record<string, string>) =>
      jsonHttp(method, url, body, { headers, localAddress: loopbackAddress() });
    for (const [method, path, body] of routes) {
      for (const [name, headers] of Object.entries(credentials)) {
        const res = await send(`${api.url}${path}`, method, body, headers);
        assertOpenAIError(res, 401, 'invalid_admin_token', null);
        assert.equal(res.body.error.type, 'authentication_error', `${method} ${path} with ${name}`);
      }
      // ADMIN_TOKEN unset on the server: even the right token is refused.
      for (const headers of [adminAuth(), {}]) {
        const res = await send(`${noAdmin.url}${path}`, method, body, headers);
        assertOpenAIError(res, 401, 'invalid_admin_token', null);
      }
    }
    assert.equal(await orgCount(newOrg), 0);
    assert.equal(await modelCount(newModel), 0);
    assert.equal(await deviceCount(newDevice), 0);
    assert.equal(await keyCount(tenant.org.id), keysBefore);
    // The tenant's key was not revoked, the model not disabled, no limit set.
    assert.equal((await db().organization.findUniqueOrThrow({ where: { id: tenant.org.id } })).rpmLimit, null);
    assert.equal((await db().apiKey.findUniqueOrThrow({ where: { id: tenant.keyId } })).revokedAt, null);
    assert.equal(await db().orgModel.count({ where: { orgId: tenant.org.id, modelId: catalogModel } }), 1);
    // The api without ADMIN_TOKEN still serves clients.
    const models = await http('GET', `${noAdmin.url}/v1/models`, {
      headers: { authorization: `Bearer ${tenant.key}` },
    });
    assert.equal(models.status, 200, models.text);
  });

  test('bad bodies are 400 invalid_request naming the param, and write nothing', async () => {
    const org = await createTenant([]);
    const keysPath = `/admin/orgs/${org.org.name}/keys`;
    const modelId = uniq('bad-body-model');
    const deviceName = uniq('bad-body-dev');
    const cases: [string, string, unknown, string][] = [
      ['POST', '/admin/orgs', {}, 'name'],
      ['POST', '/admin/orgs', { name: 42 }, 'name'],
      ['POST', '/admin/orgs', { name: 'has space' }, 'name'],
      ['POST', '/admin/orgs', { name: '-leading-dash' }, 'name'],
      ['POST', '/admin/orgs', { name: 'x'.repeat(65) }, 'name'],
      ['POST', keysPath, { expires_in: 'soon' }, 'expires_in'],
      ['POST', keysPath, { expires_in: '0d' }, 'expires_in'],
      ['POST', keysPath, { expires_in: '4000d' }, 'expires_in'],
      ['POST', keysPath, { expires_in: 30 }, 'expires_in'],
      ['POST', keysPath, { label: '' }, 'label'],
      ['POST', keysPath, { label: 7 }, 'label'],
      ['POST', keysPath, { label: 'x'.repeat(101) }, 'label'],
      ['POST', '/admin/models', {}, 'id'],
      ['POST', '/admin/models', { id: 'has space' }, 'id'],
      ['POST', '/admin/models', { id: modelId, max_output_tokens: 0 }, 'max_output_tokens'],
      ['POST', '/admin/models', { id: modelId, max_output_tokens: 1.5 }, 'max_output_tokens'],
      ['POST', '/admin/models', { id: modelId, max_output_tokens: '100' }, 'max_output_tokens'],
      ['POST', '/admin/models', { id: modelId, owned_by: '' }, 'owned_by'],
      ['POST', '/admin/devices', {}, 'name'],
      ['POST', '/admin/devices', { name: '' }, 'name'],
      ['POST', '/admin/devices', { name: '   ' }, 'name'],
      ['POST', '/admin/devices', { name: deviceName, org: 5 }, 'org'],
    ];
    for (const [method, path, body, param] of cases) {
      const res = await admin(method, path, body);
      assertOpenAIError(res, 400, 'invalid_request', param);
    }
    // A field the route does not know is refused too.
    assertOpenAIError(await admin('POST', '/admin/orgs', { name: uniq('extra'), extra: 1 }), 400, 'invalid_request');
    assertOpenAIError(await admin('POST', '/admin/models', { id: modelId, colour: 'red' }), 400, 'invalid_request');
    // A body that is not an object.
    assertOpenAIError(await admin('POST', '/admin/orgs', ['x']), 400, 'invalid_request');

    assert.equal(await keyCount(org.org.id), 1);
    assert.equal(await modelCount(modelId), 0);
    assert.equal(await modelCount('has space'), 0);
    assert.equal(await deviceCount(deviceName), 0);
    for (const name of ['has space', '-leading-dash', 'x'.repeat(65)]) {
      assert.equal(await orgCount(name), 0);
    }
  });

  test('invalid JSON is 400 invalid_json and writes nothing', async () => {
    const org = await createTenant([]);
    const orgName = uniq('json-org');
    const modelId = uniq('json-model');
    const deviceName = uniq('json-dev');
    const cases: [string, string][] = [
      ['/admin/orgs', `{"name":"${orgName}"`],
      ['/admin/orgs', `{name: '${orgName}'}`],
      [`/admin/orgs/${org.org.name}/keys`, '{"label":"x",}'],
      ['/admin/models', `{"id":"${modelId}"`],
      ['/admin/devices', `{"name":"${deviceName}"`],
    ];
    for (const [path, text] of cases) {
      const res = await raw('POST', path, text);
      assertOpenAIError(res, 400, 'invalid_json', null);
    }
    // No body at all is no name, not bad JSON.
    assertOpenAIError(await raw('POST', '/admin/orgs', ''), 400, 'invalid_request', 'name');

    assert.equal(await orgCount(orgName), 0);
    assert.equal(await keyCount(org.org.id), 1);
    assert.equal(await modelCount(modelId), 0);
    assert.equal(await deviceCount(deviceName), 0);
  });

  test('unknown org, key, device, task or model is 404 with its own code', async () => {
    const ghostOrg = uniq('ghost-org');
    const deviceName = uniq('ghost-dev');
    const cases: [string, string, unknown, string][] = [
      ['GET', `/admin/orgs/${ghostOrg}/keys`, undefined, 'org_not_found'],
      ['POST', `/admin/orgs/${ghostOrg}/keys`, {}, 'org_not_found'],
      ['PUT', `/admin/orgs/${ghostOrg}/models/${modelPath(catalogModel)}`, undefined, 'org_not_found'],
      ['DELETE', `/admin/orgs/${ghostOrg}/models/${modelPath(catalogModel)}`, undefined, 'org_not_found'],
      ['POST', '/admin/devices', { name: deviceName, org: ghostOrg }, 'org_not_found'],
      ['PUT', `/admin/orgs/${tenant.org.name}/models/${uniq('ghost-model')}`, undefined, 'model_not_found'],
      ['DELETE', `/admin/orgs/${tenant.org.name}/models/${uniq('ghost-model')}`, undefined, 'model_not_found'],
      ['DELETE', `/admin/keys/${randomUUID()}`, undefined, 'key_not_found'],
      ['DELETE', '/admin/keys/not-a-uuid', undefined, 'key_not_found'],
      ['DELETE', `/admin/devices/${randomUUID()}`, undefined, 'device_not_found'],
      ['DELETE', '/admin/devices/not-a-uuid', undefined, 'device_not_found'],
      ['GET', `/admin/tasks/network:${randomUUID()}`, undefined, 'task_not_found'],
      ['GET', `/admin/tasks/direct:${randomUUID()}`, undefined, 'task_not_found'],
      ['GET', '/admin/tasks/not-an-address', undefined, 'task_not_found'],
    ];
    for (const [method, path, body, code] of cases) {
      const res = await admin(method, path, body);
      const error = assertOpenAIError(res, 404, code);
      assert.ok(error.param, `${method} ${path}: no param`);
    }
    assert.equal(await orgCount(ghostOrg), 0);
    assert.equal(await deviceCount(deviceName), 0);
    // An unknown admin path is unknown_url.
    assertOpenAIError(await admin('GET', '/admin/nothing'), 404, 'unknown_url');
  });
});
