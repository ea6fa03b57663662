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
import { expectStatus } from '../support/expect-status';

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
    expect({ code: res.code, stderr: res.stderr }).toEqual(expect.objectContaining({ code: 0 }));
    expect(res.stderr).toBe('');
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
      expectStatus(res, 200);
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
    expect(created.key).toMatch(API_KEY_FORMAT);
    expect({
      ok: created.key.startsWith(created.prefix),
      message: `prefix ${created.prefix} is not the key's start`,
    }).toEqual(expect.objectContaining({ ok: true }));
    // the display prefix gives away too much of the key
    expect(created.prefix.length).toBeLessThan(created.key.length - 20);
    expect(created.org).toBe(tenant.org.name);
    expect(created.label).toBe('auth e2e');
    expect(created.expires_at).toBeNull();

    const viaBearer = await models(bearer(created.key));
    expectStatus(viaBearer, 200);
    expect(viaBearer.body.data.map((m: { id: string }) => m.id)).toEqual([model]);
    const viaHeader = await models({ 'x-api-key': created.key });
    expectStatus(viaHeader, 200);
    expect(viaHeader.body).toEqual(viaBearer.body);

    const row = await db().apiKey.findUniqueOrThrow({ where: { id: created.id } });
    expect(row.hash).toBe(sha256(created.key));
    expect(row.orgId).toBe(tenant.org.id);
    expect(row.prefix).toBe(created.prefix);
    for (const [column, value] of Object.entries(row)) {
      expect({ ok: !String(value).includes(created.key), message: `column ${column} holds the key` }).toEqual(
        expect.objectContaining({ ok: true }),
      );
    }
    // No column of any key row holds the key or its undisplayed part.
    expect(await tableContains('api_keys', created.key)).toBe(false);
    expect(await tableContains('api_keys', created.key.slice(created.prefix.length))).toBe(false);
  });

  test('`key revoke`: a key the api has just accepted (and cached) is refused from then on', async () => {
    const tenant = await createTenant([model]);
    const created = await createKeyWithCli(tenant);
    // Used first, so that the api's cache holds it as valid.
    expect((await models(bearer(created.key))).status).toBe(200);
    expect((await models({ 'x-api-key': created.key })).status).toBe(200);

    const revoked = await cli(['key', 'revoke', created.id]);
    expect({ code: revoked.code, stderr: revoked.stderr }).toEqual(expect.objectContaining({ code: 0 }));
    expect(revoked.stdout).toMatch(new RegExp(created.id));
    const res = await until401(created.key);
    assertOpenAIError(res, 401, 'invalid_api_key', null);

    // And it stays refused, through the other header too, once the cache has been refreshed.
    for (let i = 0; i < 3; i++) {
      await sleep(300);
      expect((await models({ 'x-api-key': created.key })).status).toBe(401);
      expect((await models(bearer(created.key))).status).toBe(401);
    }
    const row = await db().apiKey.findUniqueOrThrow({ where: { id: created.id } });
    // revokedAt not set
    expect(row.revokedAt).toBeInstanceOf(Date);
  });

  test('`key create --expires-in`: the expiry is counted from creation, and an expired key is refused', async () => {
    const tenant = await createTenant([model]);
    const started = Date.now();
    const created = await createKeyWithCli(tenant, '--expires-in', '2h');
    const returned = Date.now();
    if (!created.expires_at) {
      throw new Error('expires_at missing');
    }
    const expiresAt = Date.parse(created.expires_at);
    expect({
      ok: expiresAt >= started + 7_200_000 - 50 && expiresAt <= returned + 7_200_000 + 50,
      message: `expires_at ${created.expires_at} is not 2 h after creation`,
    }).toEqual(expect.objectContaining({ ok: true }));
    expect((await models(bearer(created.key))).status).toBe(200);
    expect((await models({ 'x-api-key': created.key })).status).toBe(200);

    await expire(created.id);
    const res = await until401(created.key);
    assertOpenAIError(res, 401, 'invalid_api_key', null);
    expect((await models({ 'x-api-key': created.key })).status).toBe(401);

    const listed = await http('GET', `${api.url}/admin/orgs/${tenant.org.name}/keys`, { headers: adminAuth() });
    const entry = listed.body.data.find((k: { id: string }) => k.id === created.id);
    expect(entry.status).toBe('expired');
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
        expect({ status: res.status, message: `${name} key via ${how}: ${res.status} ${res.text}` }).toEqual(
          expect.objectContaining({ status: 401 }),
        );
        bodies[`${name} via ${how}`] = res.text;
      }
    }
    const distinct = new Set(Object.values(bodies));
    expect({ size: distinct.size, message: `401 bodies differ:\n${JSON.stringify(bodies, null, 2)}` }).toEqual(
      expect.objectContaining({ size: 1 }),
    );
    const body = JSON.parse(bodies['unknown via bearer']);
    expect(Object.keys(body)).toEqual(['error']);
    expect(Object.keys(body.error).sort()).toEqual(['code', 'message', 'param', 'type']);
    expect(typeof body.error.message).toBe('string');
    expect(body.error.message.length > 0).toBe(true);
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
      expect({ status: res.status, message: `${name}: ${res.status} ${res.text}` }).toEqual(
        expect.objectContaining({ status: 401 }),
      );
      const error = assertOpenAIError(res, 401, 'invalid_api_key', null);
      expect({ type: error.type, name }).toEqual(expect.objectContaining({ type: 'invalid_request_error' }));
    }
  });
});
