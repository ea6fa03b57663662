import assert from 'node:assert/strict';
import { AdminService } from '@app/common';
import { ADMIN_TOKEN, cli, closeDb, createTenant, db, http, sleep, startApi, uniq } from '../support/stack';
import type { Api, Tenant } from '../support/stack';
import {
  API_KEY_FORMAT,
  adminAuth,
  assertOpenAIError,
  bearer,
  sha256,
  tableContains,
  unknownKey,
  stopApis,
  httpFrom,
  loopbackAddress,
} from './helpers';

interface CreatedKey {
  id: string;
  key: string;
  prefix: string;
  org: string;
  label: string | null;
  created_at: string;
  expires_at: string | null;
}

/**
 * Key lifecycle through the CLI's command layer and the real api: create, use, revoke, expire;
 * identical 401s. Each test has its own organization and keys.
 */
describe('API keys', () => {
  let api: Api;
  const model = `${uniq('auth')}/Tiny-GGUF:Q4_K_M`;

  /** This suite's own client address: it provokes many 401s on purpose (see loopbackAddress). */
  const client = loopbackAddress();
  const models = (headers: Record<string, string>) => httpFrom(client, 'GET', `${api.url}/v1/models`, headers);

  async function createKeyWithCli(tenant: Tenant, ...extra: string[]): Promise<CreatedKey> {
    const res = await cli(['--json', 'key', 'create', '--org', tenant.org.name, ...extra]);
    assert.equal(res.code, 0, res.stderr);
    assert.equal(res.stderr, '');
    return JSON.parse(res.stdout) as CreatedKey;
  }

  /**
   * Polls until the key is refused. The api caches a key lookup for half a second; the bound here is
   * generous on purpose (a loaded machine), the cache's own figure is the api's documented behaviour.
   */
  async function until401(key: string) {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const res = await models(bearer(key));
      if (res.status === 401 || Date.now() > deadline) {
        return res;
      }
      assert.equal(res.status, 200, res.text);
      await sleep(50);
    }
  }

  /** Moves a key's expiry into the past, as the passing of time would. */
  const expire = (id: string) =>
    db().apiKey.update({ where: { id }, data: { expiresAt: new Date(Date.now() - 1_000) } });

  beforeAll(async () => {
    api = await startApi();
  });

  afterAll(async () => {
    await stopApis(api);
    await closeDb();
  });

  test('a key from `key create` works as Bearer and as X-API-Key, and only its SHA-256 is stored', async () => {
    const tenant = await createTenant([model]);
    const created = await createKeyWithCli(tenant, '--label', 'auth e2e');
    assert.match(created.key, API_KEY_FORMAT);
    assert.ok(created.key.startsWith(created.prefix), `prefix ${created.prefix} is not the key's start`);
    assert.ok(created.prefix.length < created.key.length - 20, 'the display prefix gives away too much of the key');
    assert.equal(created.org, tenant.org.name);
    assert.equal(created.label, 'auth e2e');
    assert.equal(created.expires_at, null);

    const viaBearer = await models(bearer(created.key));
    assert.equal(viaBearer.status, 200, viaBearer.text);
    expect(viaBearer.body.data.map((m: { id: string }) => m.id)).toEqual([model]);
    const viaHeader = await models({ 'x-api-key': created.key });
    assert.equal(viaHeader.status, 200, viaHeader.text);
    expect(viaHeader.body).toEqual(viaBearer.body);

    const row = await db().apiKey.findUniqueOrThrow({ where: { id: created.id } });
    assert.equal(row.hash, sha256(created.key));
    assert.equal(row.orgId, tenant.org.id);
    assert.equal(row.prefix, created.prefix);
    for (const [column, value] of Object.entries(row)) {
      assert.ok(!String(value).includes(created.key), `column ${column} holds the key`);
    }
    // No column of any key row holds the key or its undisplayed part.
    assert.equal(await tableContains('api_keys', created.key), false);
    assert.equal(await tableContains('api_keys', created.key.slice(created.prefix.length)), false);
  });

  test('`key revoke`: a key the api has just accepted (and cached) is refused from then on', async () => {
    const tenant = await createTenant([model]);
    const created = await createKeyWithCli(tenant);
    // Used first, so that the api's cache holds it as valid.
    assert.equal((await models(bearer(created.key))).status, 200);
    assert.equal((await models({ 'x-api-key': created.key })).status, 200);

    const revoked = await cli(['key', 'revoke', created.id]);
    assert.equal(revoked.code, 0, revoked.stderr);
    assert.match(revoked.stdout, new RegExp(created.id));
    const res = await until401(created.key);
    assertOpenAIError(res, 401, 'invalid_api_key', null);

    // And it stays refused, through the other header too, once the cache has been refreshed.
    for (let i = 0; i < 3; i++) {
      await sleep(300);
      assert.equal((await models({ 'x-api-key': created.key })).status, 401);
      assert.equal((await models(bearer(created.key))).status, 401);
    }
    const row = await db().apiKey.findUniqueOrThrow({ where: { id: created.id } });
    assert.ok(row.revokedAt instanceof Date, 'revokedAt not set');
  });

  test('`key create --expires-in`: the expiry is counted from creation, and an expired key is refused', async () => {
    const tenant = await createTenant([model]);
    const started = Date.now();
    const created = await createKeyWithCli(tenant, '--expires-in', '2h');
    const returned = Date.now();
    assert.ok(created.expires_at, 'expires_at missing');
    const expiresAt = Date.parse(created.expires_at);
    assert.ok(
      expiresAt >= started + 7_200_000 - 50 && expiresAt <= returned + 7_200_000 + 50,
      `expires_at ${created.expires_at} is not 2 h after creation`,
    );
    assert.equal((await models(bearer(created.key))).status, 200);
    assert.equal((await models({ 'x-api-key': created.key })).status, 200);

    await expire(created.id);
    const res = await until401(created.key);
    assertOpenAIError(res, 401, 'invalid_api_key', null);
    assert.equal((await models({ 'x-api-key': created.key })).status, 401);

    const listed = await http('GET', `${api.url}/admin/orgs/${tenant.org.name}/keys`, { headers: adminAuth() });
    const entry = listed.body.data.find((k: { id: string }) => k.id === created.id);
    assert.equal(entry.status, 'expired');
  });

  test('unknown, revoked and expired keys get byte-identical 401 bodies', async () => {
    const tenant = await createTenant([model]);
    const admin = new AdminService(db());
    const revoked = await admin.createKey({ org: tenant.org.name });
    await admin.revokeKey(revoked.id);
    const expired = await admin.createKey({ org: tenant.org.name, expiresIn: '1h' });
    await expire(expired.id);
    const cases = { unknown: unknownKey(), revoked: revoked.key, expired: expired.key };
    const bodies: Record<string, string> = {};
    for (const [name, key] of Object.entries(cases)) {
      for (const [how, headers] of Object.entries({ bearer: bearer(key), 'x-api-key': { 'x-api-key': key } })) {
        const res = await models(headers);
        assert.equal(res.status, 401, `${name} key via ${how}: ${res.status} ${res.text}`);
        bodies[`${name} via ${how}`] = res.text;
      }
    }
    const distinct = new Set(Object.values(bodies));
    assert.equal(distinct.size, 1, `401 bodies differ:\n${JSON.stringify(bodies, null, 2)}`);
    const body = JSON.parse(bodies['unknown via bearer']);
    expect(Object.keys(body)).toEqual(['error']);
    expect(Object.keys(body.error).sort()).toEqual(['code', 'message', 'param', 'type']);
    assert.equal(typeof body.error.message, 'string');
    assert.ok(body.error.message.length > 0);
    expect(body).toEqual({
      error: { message: body.error.message, type: 'invalid_request_error', param: null, code: 'invalid_api_key' },
    });
  });

  test('malformed and missing keys are refused with 401 invalid_api_key', async () => {
    const cases: Record<string, Record<string, string>> = {
      'no credentials': {},
      'empty Bearer': { authorization: 'Bearer ' },
      'Bearer without sy_ prefix': bearer('not-a-key'),
      'too short': bearer('sy_abc123'),
      'bad characters': bearer(`sy_${'a'.repeat(30)}-+${'b'.repeat(10)}`),
      'device token as key': bearer(`syd_${'a'.repeat(40)}`),
      'admin token as key': bearer(ADMIN_TOKEN),
      'Basic auth': { authorization: `Basic ${Buffer.from('user:pass').toString('base64')}` },
      'malformed X-API-Key': { 'x-api-key': 'sy_' },
      'empty X-API-Key': { 'x-api-key': '' },
    };
    for (const [name, headers] of Object.entries(cases)) {
      const res = await models(headers);
      assert.equal(res.status, 401, `${name}: ${res.status} ${res.text}`);
      const error = assertOpenAIError(res, 401, 'invalid_api_key', null);
      assert.equal(error.type, 'invalid_request_error', name);
    }
  });
});
