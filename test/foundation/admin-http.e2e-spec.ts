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
import { expectStatus } from '../support/expect-status';

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
    expectStatus(created, 201);
    expect(created.body.id).toMatch(UUID_FORMAT);
    expect(created.body.name).toBe(name);
    expect(typeof created.body.created_at).toBe('string');
    const row = await db().organization.findUniqueOrThrow({ where: { name } });
    expect(row.id).toBe(created.body.id);

    const listed = await admin('GET', '/admin/orgs');
    expectStatus(listed, 200);
    expect(listed.body.object).toBe('list');
    const entry = listed.body.data.find((o: { name: string }) => o.name === name);
    expect(entry.id).toBe(created.body.id);
    expect(entry.created_at).toBe(created.body.created_at);
    expect(entry.active_keys).toBe(0);
    expect(entry.models).toBe(0);
    expect(entry.devices).toBe(0);
    expect(entry.limits).toEqual({ rpm: null, concurrency: null, max_queued: null });
    expect([entry.network, entry.resume, entry.compat, entry.weight]).toEqual([true, true, 'openai', 1]);
    const mine = listed.body.data.find((o: { name: string }) => o.name === tenant.org.name);
    expect(mine.active_keys).toBe(1);
    expect(mine.models).toBe(1);
  });

  test('PATCH /admin/orgs/{org} sets and removes limits', async () => {
    const org = await createTenant([]);
    const path = `/admin/orgs/${org.org.name}`;
    const set = await admin('PATCH', path, { rpm: 60, concurrency: 2 });
    expectStatus(set, 200);
    expect(set.body).toEqual({
      id: org.org.id,
      name: org.org.name,
      limits: { rpm: 60, concurrency: 2, max_queued: null },
      network: true,
      resume: true,
      compat: 'openai',
      weight: 1,
      monthly_token_budget: null,
    });
    // Fields left out keep their value; null removes a limit.
    const cleared = await admin('PATCH', path, { concurrency: null, max_queued: 5 });
    expectStatus(cleared, 200);
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
    expect(await orgCount(tenant.org.name)).toBe(1);
  });

  test('keys: create, list and revoke through /admin', async () => {
    const org = tenant.org.name;
    const created = await admin('POST', `/admin/orgs/${org}/keys`, { label: 'ci', expires_in: '30d' });
    expectStatus(created, 201);
    const { id, key, prefix } = created.body;
    expect(id).toMatch(UUID_FORMAT);
    expect(key).toMatch(API_KEY_FORMAT);
    expect(key.startsWith(prefix)).toBe(true);
    expect(created.body.org).toBe(org);
    expect(created.body.label).toBe('ci');
    const expires = Date.parse(created.body.expires_at);
    expect({
      ok: Math.abs(expires - (Date.now() + 30 * 86_400_000)) < 60_000,
      message: `expires_at ${created.body.expires_at}`,
    }).toEqual(expect.objectContaining({ ok: true }));
    const row = await db().apiKey.findUniqueOrThrow({ where: { id } });
    expect(row.hash).toBe(sha256(key));
    expect(await tableContains('api_keys', key)).toBe(false);

    // The new key works on the client API.
    const usable = await http('GET', `${api.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
    expectStatus(usable, 200);

    const listed = await admin('GET', `/admin/orgs/${org}/keys`);
    expectStatus(listed, 200);
    expect(listed.body.object).toBe('list');
    // the key list shows the key
    expect(listed.text).not.toContain(key);
    const entry = listed.body.data.find((k: { id: string }) => k.id === id);
    expect(entry.prefix).toBe(prefix);
    expect(entry.status).toBe('active');
    expect(entry.label).toBe('ci');
    expect(entry.revoked_at).toBeNull();

    const revoked = await admin('DELETE', `/admin/keys/${id}`);
    expectStatus(revoked, 200);
    expect(revoked.body.id).toBe(id);
    expect(revoked.body.prefix).toBe(prefix);
    expect(typeof revoked.body.revoked_at).toBe('string');
    const later = (await admin('GET', `/admin/orgs/${org}/keys`)).body.data.find((k: { id: string }) => k.id === id);
    expect(later.status).toBe('revoked');
    expect(later.revoked_at).toBe(revoked.body.revoked_at);
    // Revoking again keeps the first revocation.
    const again = await admin('DELETE', `/admin/keys/${id}`);
    expectStatus(again, 200);
    expect(again.body.revoked_at).toBe(revoked.body.revoked_at);

    // A key without a body: no label, no expiry.
    const plain = await admin('POST', `/admin/orgs/${org}/keys`);
    expectStatus(plain, 201);
    expect(plain.body.label).toBeNull();
    expect(plain.body.expires_at).toBeNull();
  });

  test('models: add, list, enable and disable through /admin', async () => {
    const id = `${uniq('vendor')}/Model-GGUF:Q4_K_M`;
    const added = await admin('POST', '/admin/models', { id, max_output_tokens: 4096, owned_by: 'acme' });
    expectStatus(added, 201);
    expect(added.body).toEqual({
      id,
      kind: 'chat',
      max_output_tokens: 4096,
      owned_by: 'acme',
      network: false,
      allowed_digests: [],
      created_at: added.body.created_at,
    });
    expect(typeof added.body.created_at).toBe('string');
    const row = await db().model.findUniqueOrThrow({ where: { id } });
    expect(row.maxOutputTokens).toBe(4096);
    expect(row.ownedBy).toBe('acme');

    assertOpenAIError(await admin('POST', '/admin/models', { id }), 409, 'conflict', 'id');
    expect(await modelCount(id)).toBe(1);

    const plainId = uniq('plain-model');
    const plain = await admin('POST', '/admin/models', { id: plainId });
    expectStatus(plain, 201);
    expect(plain.body.max_output_tokens).toBeNull();
    expect(plain.body.owned_by).toBe('switchyard');

    // An embedding model: the kind is the only difference.
    const embeddingId = uniq('embed-model');
    const embedding = await admin('POST', '/admin/models', { id: embeddingId, kind: 'embedding' });
    expectStatus(embedding, 201);
    expect(embedding.body).toEqual({
      id: embeddingId,
      kind: 'embedding',
      max_output_tokens: null,
      owned_by: 'switchyard',
      network: false,
      allowed_digests: [],
      created_at: embedding.body.created_at,
    });
    expect((await db().model.findUniqueOrThrow({ where: { id: embeddingId } })).kind).toBe('embedding');
    const chat = await admin('POST', '/admin/models', { id: uniq('chat-model'), kind: 'chat' });
    expectStatus(chat, 201);
    expect(chat.body.kind).toBe('chat');

    const find = async (modelId: string) =>
      (await admin('GET', '/admin/models')).body.data.find((m: { id: string }) => m.id === modelId);
    expect((await find(id)).enabled_for).toEqual([]);
    expect([(await find(id)).kind, (await find(plainId)).kind, (await find(embeddingId)).kind]).toEqual([
      'chat',
      'chat',
      'embedding',
    ]);

    const org = tenant.org.name;
    for (let i = 0; i < 2; i++) {
      // Enabling twice is harmless.
      const enabled = await admin('PUT', `/admin/orgs/${org}/models/${modelPath(id)}`);
      expectStatus(enabled, 200);
      expect(enabled.body).toEqual({ model: id, org, enabled: true });
    }
    expect((await find(id)).enabled_for).toEqual([org]);
    expect(await db().orgModel.count({ where: { orgId: tenant.org.id, modelId: id } })).toBe(1);

    const disabled = await admin('DELETE', `/admin/orgs/${org}/models/${modelPath(id)}`);
    expectStatus(disabled, 200);
    expect(disabled.body).toEqual({ model: id, org, enabled: false });
    expect((await find(id)).enabled_for).toEqual([]);
    expect(await db().orgModel.count({ where: { orgId: tenant.org.id, modelId: id } })).toBe(0);
  });

  test('models: PATCH changes the fields it is given and no others; a bad body or model changes nothing', async () => {
    const id = `${uniq('patch')}/Model:Q8_0`;
    const added = await admin('POST', '/admin/models', { id, max_output_tokens: 512, network: true });
    expectStatus(added, 201);
    expect(added.body.network).toBe(true);

    const off = await admin('PATCH', `/admin/models/${modelPath(id)}`, { network: false });
    expectStatus(off, 200);
    expect(off.body).toMatchObject({ id, max_output_tokens: 512, owned_by: 'switchyard', network: false });
    const unbounded = await admin('PATCH', `/admin/models/${modelPath(id)}`, {
      max_output_tokens: null,
      owned_by: 'x',
    });
    expect(unbounded.body).toMatchObject({ id, kind: 'chat', max_output_tokens: null, owned_by: 'x', network: false });
    const embedding = await admin('PATCH', `/admin/models/${modelPath(id)}`, { kind: 'embedding' });
    expectStatus(embedding, 200);
    expect(embedding.body).toMatchObject({
      id,
      kind: 'embedding',
      max_output_tokens: null,
      owned_by: 'x',
      network: false,
    });
    expect((await db().model.findUniqueOrThrow({ where: { id } })).kind).toBe('embedding');
    const chat = await admin('PATCH', `/admin/models/${modelPath(id)}`, { kind: 'chat' });
    expect(chat.body).toMatchObject({ id, kind: 'chat', owned_by: 'x' });

    const before = await db().model.findUniqueOrThrow({ where: { id } });
    for (const kind of ['Embedding', 1, null, 'completion']) {
      assertOpenAIError(
        await admin('PATCH', `/admin/models/${modelPath(id)}`, { kind, network: true }),
        400,
        'invalid_request',
        'kind',
      );
    }
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
    expectStatus(direct, 201);
    expect(direct.body.id).toMatch(UUID_FORMAT);
    expect(direct.body.token).toMatch(DEVICE_TOKEN_FORMAT);
    expect(direct.body.name).toBe(directName);
    expect(direct.body.org).toBe(tenant.org.name);
    expect(direct.body.pool).toBe('direct');
    const network = await admin('POST', '/admin/devices', { name: networkName });
    expectStatus(network, 201);
    expect(network.body.org).toBeNull();
    expect(network.body.pool).toBe('network');

    for (const created of [direct.body, network.body]) {
      const row = await db().device.findUniqueOrThrow({ where: { id: created.id } });
      expect(row.tokenHash).toBe(sha256(created.token));
      expect(await tableContains('devices', created.token)).toBe(false);
    }
    expect((await db().device.findUniqueOrThrow({ where: { id: direct.body.id } })).orgId).toBe(tenant.org.id);

    const listed = await admin('GET', '/admin/devices');
    expectStatus(listed, 200);
    expect(listed.body.object).toBe('list');
    // device list shows a token
    expect(listed.text).not.toContain(direct.body.token);
    const entry = listed.body.data.find((d: { id: string }) => d.id === direct.body.id);
    expect(entry.name).toBe(directName);
    expect(entry.org).toBe(tenant.org.name);
    expect(entry.pool).toBe('direct');
    expect(entry.status).toBe('active');
    expect(direct.body.token.startsWith(entry.token_prefix)).toBe(true);

    const revoked = await admin('DELETE', `/admin/devices/${network.body.id}`);
    expectStatus(revoked, 200);
    expect(revoked.body.id).toBe(network.body.id);
    expect(typeof revoked.body.revoked_at).toBe('string');
    const later = (await admin('GET', '/admin/devices')).body.data.find(
      (d: { id: string }) => d.id === network.body.id,
    );
    expect(later.status).toBe('revoked');
    expect((await db().device.findUniqueOrThrow({ where: { id: network.body.id } })).revokedAt).toBeTruthy();
  });

  test('GET /admin/tasks/{task_address} shows a task record', async () => {
    const task = await insertTask(tenant.org.id, catalogModel);
    const res = await admin('GET', `/admin/tasks/${task.address}`);
    expectStatus(res, 200);
    expect(res.body.object).toBe('task');
    expect(res.body.task_address).toBe(task.address);
    expect(res.body.status).toBe('completed');
    expect(res.body.model).toBe(catalogModel);
    expect(res.body.mode).toBe('network');
    expect(res.body.api).toBe('openai');
    expect(res.body.stream).toBe(false);
    expect(res.body.org).toBe(tenant.org.name);
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
      ['GET', '/admin/audit'],
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
        expect({ type: res.body.error.type, message: `${method} ${path} with ${name}` }).toEqual(
          expect.objectContaining({ type: 'authentication_error' }),
        );
      }
      // ADMIN_TOKEN unset on the server: even the right token is refused.
      for (const headers of [adminAuth(), {}]) {
        const res = await send(`${noAdmin.url}${path}`, method, body, headers);
        assertOpenAIError(res, 401, 'invalid_admin_token', null);
      }
    }
    expect(await orgCount(newOrg)).toBe(0);
    expect(await modelCount(newModel)).toBe(0);
    expect(await deviceCount(newDevice)).toBe(0);
    expect(await keyCount(tenant.org.id)).toBe(keysBefore);
    // The tenant's key was not revoked, the model not disabled, no limit set.
    expect((await db().organization.findUniqueOrThrow({ where: { id: tenant.org.id } })).rpmLimit).toBeNull();
    expect((await db().apiKey.findUniqueOrThrow({ where: { id: tenant.keyId } })).revokedAt).toBeNull();
    expect(await db().orgModel.count({ where: { orgId: tenant.org.id, modelId: catalogModel } })).toBe(1);
    // The api without ADMIN_TOKEN still serves clients.
    const models = await http('GET', `${noAdmin.url}/v1/models`, {
      headers: { authorization: `Bearer ${tenant.key}` },
    });
    expectStatus(models, 200);
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
      ['POST', '/admin/models', { id: modelId, kind: 'Embedding' }, 'kind'],
      ['POST', '/admin/models', { id: modelId, kind: 1 }, 'kind'],
      ['POST', '/admin/models', { id: modelId, kind: null }, 'kind'],
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

    expect(await keyCount(org.org.id)).toBe(1);
    expect(await modelCount(modelId)).toBe(0);
    expect(await modelCount('has space')).toBe(0);
    expect(await deviceCount(deviceName)).toBe(0);
    for (const name of ['has space', '-leading-dash', 'x'.repeat(65)]) {
      expect(await orgCount(name)).toBe(0);
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

    expect(await orgCount(orgName)).toBe(0);
    expect(await keyCount(org.org.id)).toBe(1);
    expect(await modelCount(modelId)).toBe(0);
    expect(await deviceCount(deviceName)).toBe(0);
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
      expect({ ok: Boolean(error.param), message: `${method} ${path}: no param` }).toEqual(
        expect.objectContaining({ ok: true }),
      );
    }
    expect(await orgCount(ghostOrg)).toBe(0);
    expect(await deviceCount(deviceName)).toBe(0);
    // An unknown admin path is unknown_url.
    assertOpenAIError(await admin('GET', '/admin/nothing'), 404, 'unknown_url');
  });
});
