import { KEY_USE_WRITE_INTERVAL_MS, KeyUsageService } from '../../../apps/api/src/keys/key-usage.service';
import { closeDb, createTenant, db, http } from '../../support/stack';
import type { Tenant } from '../../support/stack';
import { startApiApp } from '../support/apps';
import type { InProcessApp } from '../support/apps';

/** last_used_at: recorded in memory on authentication, written in batches, at most once a minute per key. */
describe('key usage (api)', () => {
  let api: InProcessApp;
  let usage: KeyUsageService;

  beforeAll(async () => {
    api = await startApiApp();
    usage = api.app.get(KeyUsageService);
  });

  afterAll(async () => {
    await api?.close();
    await closeDb();
  });

  const lastUsed = async (tenant: Tenant) =>
    (await db().apiKey.findUniqueOrThrow({ where: { id: tenant.keyId } })).lastUsedAt;
  const useKey = async (tenant: Tenant) => {
    const res = await http('GET', `${api.url}/v1/models`, { headers: { authorization: `Bearer ${tenant.key}` } });
    expect(res.status).toBe(200);
  };

  it('a request is recorded, not written, until the flush; one flush writes every key used', async () => {
    const [a, b] = await Promise.all([createTenant([]), createTenant([])]);
    const before = Date.now();
    await useKey(a);
    await useKey(b);
    await usage.flush();
    const [usedA, usedB] = await Promise.all([lastUsed(a), lastUsed(b)]);
    expect(usedA?.getTime()).toBeGreaterThanOrEqual(before);
    expect(usedB?.getTime()).toBeGreaterThanOrEqual(before);
  });

  it('uses within a minute of the last write are not written again; later ones are', async () => {
    const tenant = await createTenant([]);
    await useKey(tenant);
    await usage.flush();
    const first = await lastUsed(tenant);
    await useKey(tenant);
    await usage.flush();
    expect(await lastUsed(tenant)).toEqual(first);

    const later = first!.getTime() + KEY_USE_WRITE_INTERVAL_MS;
    usage.record(tenant.keyId, later);
    await usage.flush();
    expect((await lastUsed(tenant))?.getTime()).toBe(later);
  });

  it('never moves last_used_at backwards (another api instance wrote a later use)', async () => {
    const tenant = await createTenant([]);
    const newer = new Date(Date.now() + 3_600_000);
    await db().apiKey.update({ where: { id: tenant.keyId }, data: { lastUsedAt: newer } });
    await useKey(tenant);
    await usage.flush();
    expect(await lastUsed(tenant)).toEqual(newer);
  });

  it('a failed key leaves last_used_at alone', async () => {
    const tenant = await createTenant([]);
    await db().apiKey.update({ where: { id: tenant.keyId }, data: { revokedAt: new Date() } });
    const res = await http('GET', `${api.url}/v1/models`, { headers: { authorization: `Bearer ${tenant.key}` } });
    expect(res.status).toBe(401);
    await usage.flush();
    expect(await lastUsed(tenant)).toBeNull();
  });
});
