import { randomUUID } from 'node:crypto';
import { AdminService } from '@app/common';
import { cli, closeDb, createTenant, db, http, sleep, startApi } from '../support/stack';
import type { Api, Tenant } from '../support/stack';
import {
  API_KEY_FORMAT,
  adminAuth,
  assertOpenAIError,
  bearer,
  httpFrom,
  humanRecord,
  loopbackAddress,
  sha256,
  stopApis,
} from './helpers';
import { expectStatus } from '../support/expect-status';

const HOUR_MS = 3_600_000;

/** Key rotation (HTTP and CLI) and last_used_at: the old key works through its grace and is refused after it. */
describe('API key rotation and last use', () => {
  let api: Api;
  let tenant: Tenant;

  /** This suite's own client address: it provokes 401s on purpose (see loopbackAddress). */
  const client = loopbackAddress();
  const models = (key: string) => httpFrom(client, 'GET', `${api.url}/v1/models`, bearer(key));
  const admin = (method: string, path: string, body?: unknown) =>
    http(method, `${api.url}${path}`, { headers: adminAuth(), body });
  const listKeys = async (org: string) => {
    const res = await admin('GET', `/admin/orgs/${org}/keys`);
    expectStatus(res, 200);
    return res.body.data as Record<string, any>[];
  };

  /**
   * Polls until the key is refused. The api caches a key lookup for half a second; the bound is
   * generous on purpose (a loaded machine).
   */
  async function until401(key: string) {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const res = await models(key);
      if (res.status === 401 || Date.now() > deadline) {
        return res;
      }
      expectStatus(res, 200);
      await sleep(50);
    }
  }

  beforeAll(async () => {
    tenant = await createTenant([]);
    api = await startApi();
  });

  afterAll(async () => {
    await stopApis(api);
    await closeDb();
  });

  test('POST /admin/keys/{id}/rotate: both keys work during the grace; after it the old key gets the 401 of a revoked key', async () => {
    const org = tenant.org.name;
    const old = await new AdminService(db()).keys.create({ org, label: 'ci' });
    // A key's monthly token budget goes with it to its successor.
    await new AdminService(db()).keys.setBudget(old.id, 50_000);
    const before = Date.now();
    const rotated = await admin('POST', `/admin/keys/${old.id}/rotate`, { grace: '2h' });
    expectStatus(rotated, 201);
    const body = rotated.body;
    expect(Object.keys(body).sort()).toEqual(
      [
        'created_at',
        'expires_at',
        'id',
        'key',
        'label',
        'org',
        'prefix',
        'rotated_from',
        'rotated_from_expires_at',
      ].sort(),
    );
    expect(body.key).toMatch(API_KEY_FORMAT);
    expect(body.key.startsWith(body.prefix)).toBe(true);
    expect([body.org, body.label, body.expires_at, body.rotated_from]).toEqual([org, 'ci', null, old.id]);
    const graceEnd = Date.parse(body.rotated_from_expires_at);
    expect({
      ok: graceEnd >= before + 2 * HOUR_MS && graceEnd <= Date.now() + 2 * HOUR_MS,
      rotated_from_expires_at: body.rotated_from_expires_at,
    }).toEqual(expect.objectContaining({ ok: true }));
    const row = await db().apiKey.findUniqueOrThrow({ where: { id: body.id } });
    expect([row.hash, row.orgId, row.rotatedFromId]).toEqual([sha256(body.key), tenant.org.id, old.id]);

    // Inside the grace both keys work.
    expect((await models(old.key)).status).toBe(200);
    expect((await models(body.key)).status).toBe(200);

    const listed = await listKeys(org);
    const oldEntry = listed.find((k) => k.id === old.id)!;
    const newEntry = listed.find((k) => k.id === body.id)!;
    expect(oldEntry).toEqual({
      id: old.id,
      prefix: old.prefix,
      label: 'ci',
      status: 'active',
      created_at: old.created_at,
      expires_at: body.rotated_from_expires_at,
      revoked_at: null,
      last_used_at: oldEntry.last_used_at,
      rotated_from: null,
      rotated_to: body.id,
      monthly_token_budget: 50_000,
    });
    expect(newEntry).toEqual({
      id: body.id,
      prefix: body.prefix,
      label: 'ci',
      status: 'active',
      created_at: body.created_at,
      expires_at: null,
      revoked_at: null,
      last_used_at: newEntry.last_used_at,
      rotated_from: old.id,
      rotated_to: null,
      monthly_token_budget: 50_000,
    });

    // The grace passes (moved in the database, as time would move it).
    await db().apiKey.update({ where: { id: old.id }, data: { expiresAt: new Date(Date.now() - 1_000) } });
    const refused = await until401(old.key);
    const revoked = await new AdminService(db()).keys.create({ org });
    await new AdminService(db()).keys.revoke(revoked.id);
    const revokedAnswer = await models(revoked.key);
    assertOpenAIError(refused, 401, 'invalid_api_key', null);
    expect(refused.text).toBe(revokedAnswer.text);
    expect((await models(body.key)).status).toBe(200);
    expect((await listKeys(org)).find((k) => k.id === old.id)!.status).toBe('expired');
  });

  test('key rotate --grace 0 (CLI): the old key is refused at once, the new one works', async () => {
    const t = await createTenant([]);
    expect((await models(t.key)).status).toBe(200);
    const res = await cli(['key', 'rotate', t.keyId, '--grace', '0']);
    expect({ code: res.code, stderr: res.stderr }).toEqual(expect.objectContaining({ code: 0 }));
    expect(res.stderr).toMatch(/Store this key now: it is not shown again\./);
    const record = humanRecord(res.stdout);
    expect(record.key).toMatch(API_KEY_FORMAT);
    expect(record.rotated_from).toBe(t.keyId);
    expect(record.org).toBe(t.org.name);
    const old = await db().apiKey.findUniqueOrThrow({ where: { id: t.keyId } });
    if (old.expiresAt?.toISOString() !== record.rotated_from_expires_at) {
      throw new Error(
        `expected old.expiresAt?.toISOString() to be record.rotated_from_expires_at, got ${String(old.expiresAt?.toISOString())}`,
      );
    }
    expect(old.expiresAt.getTime()).toBeLessThanOrEqual(Date.now());

    assertOpenAIError(await until401(t.key), 401, 'invalid_api_key', null);
    expect((await models(record.key)).status).toBe(200);

    // --json and the default grace of 24 h; the list shows the chain old → new → newest.
    const json = await cli(['--json', 'key', 'rotate', record.id]);
    expect({ code: json.code, stderr: json.stderr }).toEqual(expect.objectContaining({ code: 0 }));
    expect(json.stderr).toBe('');
    const newest = JSON.parse(json.stdout);
    const graceEnd = Date.parse(newest.rotated_from_expires_at) - Date.now();
    expect({
      ok: graceEnd > 23.9 * HOUR_MS && graceEnd <= 24 * HOUR_MS,
      rotated_from_expires_at: newest.rotated_from_expires_at,
    }).toEqual(expect.objectContaining({ ok: true }));
    const list = await cli(['--json', 'key', 'list', '--org', t.org.name]);
    const chain = JSON.parse(list.stdout).data.map((k: any) => [k.id, k.status, k.rotated_from, k.rotated_to]);
    expect(chain).toEqual([
      [t.keyId, 'expired', null, record.id],
      [record.id, 'active', t.keyId, newest.id],
      [newest.id, 'active', record.id, null],
    ]);
    const human = await cli(['key', 'list', '--org', t.org.name]);
    expect(human.stdout.split('\n')[0]).toMatch(/EXPIRES_AT\s+REVOKED_AT\s+LAST_USED_AT\s+ROTATED_FROM\s+ROTATED_TO/);
  });

  test('revoked, expired, already rotated and unknown keys, and a bad grace, are refused and change nothing', async () => {
    const t = await createTenant([]);
    const keys = new AdminService(db()).keys;
    const revoked = await keys.create({ org: t.org.name });
    await keys.revoke(revoked.id);
    const expired = await keys.create({ org: t.org.name, expiresIn: '1h' });
    await db().apiKey.update({ where: { id: expired.id }, data: { expiresAt: new Date(Date.now() - 1_000) } });
    const first = await admin('POST', `/admin/keys/${t.keyId}/rotate`);
    expectStatus(first, 201);
    const count = () => db().apiKey.count({ where: { orgId: t.org.id } });
    const keysBefore = await count();
    const expiryBefore = (await db().apiKey.findUniqueOrThrow({ where: { id: t.keyId } })).expiresAt;

    const revokedAnswer = await admin('POST', `/admin/keys/${revoked.id}/rotate`, { grace: '1h' });
    const error = assertOpenAIError(revokedAnswer, 409, 'conflict', 'id');
    expect(error.message).toBe(`API key '${revoked.id}' is revoked and cannot be rotated; create a new key instead`);
    const expiredAnswer = assertOpenAIError(await admin('POST', `/admin/keys/${expired.id}/rotate`), 409, 'conflict');
    expect(expiredAnswer.message).toMatch(/has expired and cannot be rotated/);
    const twice = assertOpenAIError(await admin('POST', `/admin/keys/${t.keyId}/rotate`), 409, 'conflict', 'id');
    expect(twice.message).toBe(`API key '${t.keyId}' was already rotated (to '${first.body.id}')`);
    assertOpenAIError(await admin('POST', `/admin/keys/${randomUUID()}/rotate`), 404, 'key_not_found', 'id');
    assertOpenAIError(await admin('POST', '/admin/keys/not-a-uuid/rotate'), 404, 'key_not_found', 'id');
    for (const grace of ['1', '-1h', '24 h', '3651d', '0s', 'forever']) {
      const bad = assertOpenAIError(
        await admin('POST', `/admin/keys/${first.body.id}/rotate`, { grace }),
        400,
        'invalid_request',
        'grace',
      );
      expect({ message: bad.message, context: `grace ${grace}` }).toEqual(
        expect.objectContaining({
          message: 'grace must be 0 or a number followed by s, m, h or d (e.g. 24h), at most 3650d',
        }),
      );
    }
    assertOpenAIError(await admin('POST', `/admin/keys/${first.body.id}/rotate`, { grace: 5 }), 400, 'invalid_request');
    assertOpenAIError(
      await admin('POST', `/admin/keys/${first.body.id}/rotate`, { grace: '1h', label: 'x' }),
      400,
      'invalid_request',
      'label',
    );
    const viaCli = await cli(['key', 'rotate', revoked.id]);
    expect(viaCli.code).toBe(1);
    expect(viaCli.stderr).toBe(
      `error: API key '${revoked.id}' is revoked and cannot be rotated; create a new key instead (conflict)\n`,
    );
    const badGrace = await cli(['--json', 'key', 'rotate', first.body.id, '--grace', '2w']);
    expect(badGrace.code).toBe(1);
    expect(JSON.parse(badGrace.stderr).error.param).toBe('grace');

    expect(await count()).toBe(keysBefore);
    const after = await db().apiKey.findUniqueOrThrow({ where: { id: t.keyId } });
    expect(after.expiresAt?.getTime()).toBe(expiryBefore?.getTime());
    expect((await db().apiKey.findUniqueOrThrow({ where: { id: first.body.id } })).expiresAt).toBeNull();
  });

  test('a rotation never extends a key that expires before the grace ends', async () => {
    const t = await createTenant([]);
    const short = await new AdminService(db()).keys.create({ org: t.org.name, expiresIn: '1h' });
    const res = await admin('POST', `/admin/keys/${short.id}/rotate`, { grace: '30d' });
    expectStatus(res, 201);
    expect(res.body.rotated_from_expires_at).toBe(short.expires_at);
  });

  test('a key with a lifetime is replaced by one with the same lifetime, from the rotation; one without by one without', async () => {
    const t = await createTenant([]);
    const admins = new AdminService(db());
    const lived = await admins.keys.create({ org: t.org.name, expiresIn: '30d' });
    const before = Date.now();
    const res = await admin('POST', `/admin/keys/${lived.id}/rotate`, { grace: '1h' });
    expectStatus(res, 201);
    const lifetime = Date.parse(lived.expires_at!) - Date.parse(lived.created_at!);
    const successorExpiry = Date.parse(res.body.expires_at);
    expect({ ok: successorExpiry >= before + lifetime - 1_000, body: res.text }).toEqual(
      expect.objectContaining({ ok: true }),
    );
    expect({ ok: successorExpiry <= Date.now() + lifetime + 1_000, body: res.text }).toEqual(
      expect.objectContaining({ ok: true }),
    );
    const row = await db().apiKey.findUniqueOrThrow({ where: { id: res.body.id } });
    expect(row.expiresAt?.getTime()).toBe(successorExpiry);

    const forever = await admins.keys.create({ org: t.org.name });
    const plain = await admin('POST', `/admin/keys/${forever.id}/rotate`, {});
    expectStatus(plain, 201);
    expect(plain.body.expires_at).toBeNull();
  });

  test('last_used_at: null until the key is used, then the time of a use', async () => {
    const t = await createTenant([]);
    const entry = async () => (await listKeys(t.org.name)).find((k) => k.id === t.keyId)!;
    expect((await entry()).last_used_at).toBeNull();
    const human = await cli(['key', 'list', '--org', t.org.name]);
    expect(human.stdout).toMatch(/LAST_USED_AT/);

    const before = Date.now();
    expect((await models(t.key)).status).toBe(200);
    const after = Date.now();
    // Written in the background (batched every few seconds); a generous bound for a busy machine.
    const deadline = Date.now() + 30_000;
    let seen: string | null = null;
    while (seen === null && Date.now() < deadline) {
      await sleep(250);
      seen = (await entry()).last_used_at;
    }
    if (!seen) {
      throw new Error('last_used_at was not written');
    }
    const usedAt = Date.parse(seen);
    // The api stamps the use with its own clock, on this same machine.
    expect({
      ok: usedAt >= before - 5 && usedAt <= after + 5,
      message: `last_used_at ${seen} not in [${before}, ${after}]`,
    }).toEqual(expect.objectContaining({ ok: true }));
  });
});
