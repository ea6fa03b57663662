import { createHash, randomUUID } from 'node:crypto';
import { hostname, userInfo } from 'node:os';
import { ADMIN_TOKEN, cli, closeDb, db, http, startApi, uniq } from '../support/stack';
import type { Api } from '../support/stack';
import { assertOpenAIError, modelPath } from '../foundation/helpers';
import { expectStatus } from '../support/expect-status';
import { adminClient } from './helpers';

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/**
 * The audit log of admin changes (issue 39, item 4): each admin action of the admin e2e suites, made
 * through the admin API (admin token), the dashboard (a session) and the CLI, against a real api and
 * Postgres, leaves its entry: who, through what, what, on what, the values before and after, and never
 * a secret. Then the log's route: paging, filters, refusals.
 */
describe('audit log of admin changes', () => {
  let api: Api;
  let admin: ReturnType<typeof adminClient>;
  /** Every secret the actions handled: none may be in the log. */
  const secrets: string[] = [ADMIN_TOKEN, sha256(ADMIN_TOKEN)];
  const started = new Date(Date.now() - 60_000);
  const model = `${uniq('audit')}/Audit-Model:Q4_0`;
  const cliActor = `cli:${userInfo().username}@${hostname()}`;
  /** The admin token's name in the log, as every api entry carries it. */
  let tokenActor = '';

  /** The newest entry of a kind on a target (the log is newest first). */
  async function entryOf(kind: string, target: string) {
    const res = await admin('GET', `/admin/audit?kind=${encodeURIComponent(kind)}&limit=500`);
    expectStatus(res, 200);
    for (const secret of secrets) {
      expect({ leaked: res.text.includes(secret), secret: secret.slice(0, 8) }).toEqual({
        leaked: false,
        secret: secret.slice(0, 8),
      });
    }
    const entry = res.body.data.find((e: { target: string }) => e.target === target);
    if (!entry) {
      throw new Error(`no ${kind} entry for ${target}: ${res.text.slice(0, 2_000)}`);
    }
    return entry;
  }

  const count = async (kind: string, target: string) =>
    (
      await db().$queryRawUnsafe<{ n: number }[]>(
        'SELECT count(*)::int AS n FROM audit_log WHERE kind = $1 AND target = $2',
        kind,
        target,
      )
    )[0].n;

  /** An api entry: the token's actor, `via: api`, made during this test. */
  const byToken = (entry: any) => {
    expect([entry.via, entry.actor]).toEqual(['api', tokenActor]);
    const at = Date.parse(entry.at);
    expect({ ok: at >= started.getTime() && at <= Date.now() + 60_000, at: entry.at }).toEqual(
      expect.objectContaining({ ok: true }),
    );
    expect(entry.id).toMatch(/^[1-9][0-9]*$/);
  };

  beforeAll(async () => {
    api = await startApi();
    admin = adminClient(api);
  });

  afterAll(async () => {
    await api?.stop();
    await closeDb();
  });

  test('through the admin API: organizations, keys, models, canaries and devices, each action its entry', async () => {
    // Organizations.
    const org = uniq('audit-org');
    expectStatus(await admin('POST', '/admin/orgs', { name: org }), 201);
    const created = await entryOf('org.create', org);
    tokenActor = created.actor;
    expect(tokenActor).toMatch(/^admin-token:[0-9a-f]{12}$/);
    byToken(created);
    expect(created.before).toBeNull();
    expect(created.after).toMatchObject({ name: org, rpm_limit: null, network: true, weight: 1 });

    expectStatus(await admin('PATCH', `/admin/orgs/${org}`, { rpm: 60, network: false, weight: 2 }), 200);
    const updated = await entryOf('org.update', org);
    byToken(updated);
    expect(updated.before).toMatchObject({ name: org, rpm_limit: null, network: true, weight: 1 });
    expect(updated.after).toMatchObject({ name: org, rpm_limit: 60, network: false, weight: 2 });
    // A refused change (400, 404, 409) changes nothing and records nothing.
    const updates = await count('org.update', org);
    assertOpenAIError(await admin('PATCH', `/admin/orgs/${org}`, { rpm: 0 }), 400, 'invalid_request', 'rpm');
    assertOpenAIError(await admin('POST', '/admin/orgs', { name: org }), 409, 'conflict', 'name');
    expect([await count('org.update', org), await count('org.create', org)]).toEqual([updates, 1]);

    // API keys: create, set a budget, rotate, revoke.
    const key = await admin('POST', `/admin/orgs/${org}/keys`, { label: 'ci' });
    expectStatus(key, 201);
    secrets.push(key.body.key, sha256(key.body.key));
    const keyCreated = await entryOf('key.create', key.body.id);
    byToken(keyCreated);
    expect(keyCreated.before).toBeNull();
    expect(keyCreated.after).toMatchObject({ id: key.body.id, prefix: key.body.prefix, label: 'ci', org });
    expect(Object.keys(keyCreated.after)).not.toContain('hash');

    expectStatus(await admin('PATCH', `/admin/keys/${key.body.id}`, { monthly_token_budget: 5000 }), 200);
    const budget = await entryOf('key.budget', key.body.id);
    byToken(budget);
    expect([budget.before.monthly_token_budget, budget.after.monthly_token_budget]).toEqual([null, '5000']);

    const rotated = await admin('POST', `/admin/keys/${key.body.id}/rotate`, { grace: '1h' });
    expectStatus(rotated, 201);
    secrets.push(rotated.body.key, sha256(rotated.body.key));
    const rotation = await entryOf('key.rotate', key.body.id);
    byToken(rotation);
    expect(rotation.before).toMatchObject({ id: key.body.id, expires_at: null, org });
    expect(rotation.after).toMatchObject({ id: key.body.id, expires_at: rotated.body.rotated_from_expires_at });
    expect(rotation.after.replacement).toMatchObject({ id: rotated.body.id, prefix: rotated.body.prefix, label: 'ci' });

    expectStatus(await admin('DELETE', `/admin/keys/${rotated.body.id}`), 200);
    const revoked = await entryOf('key.revoke', rotated.body.id);
    byToken(revoked);
    expect(revoked.before).toMatchObject({ id: rotated.body.id, revoked_at: null, org });
    expect(typeof revoked.after.revoked_at).toBe('string');
    assertOpenAIError(await admin('DELETE', `/admin/keys/${randomUUID()}`), 404, 'key_not_found');

    // Models: add, change, enable, disable.
    expectStatus(await admin('POST', '/admin/models', { id: model, max_output_tokens: 512 }), 201);
    const added = await entryOf('model.add', model);
    byToken(added);
    expect(added.after).toMatchObject({ id: model, max_output_tokens: 512, network: false, kind: 'chat' });

    expectStatus(await admin('PATCH', `/admin/models/${modelPath(model)}`, { network: true }), 200);
    const changed = await entryOf('model.update', model);
    byToken(changed);
    expect([changed.before.network, changed.after.network]).toEqual([false, true]);
    expect(changed.after.max_output_tokens).toBe(512);

    const enablement = `/admin/orgs/${org}/models/${modelPath(model)}`;
    expectStatus(await admin('PUT', enablement), 200);
    const enabled = await entryOf('model.enable', `${org}/${model}`);
    byToken(enabled);
    expect([enabled.before, enabled.after]).toEqual([
      { org, model, enabled: false },
      { org, model, enabled: true },
    ]);
    expectStatus(await admin('DELETE', enablement), 200);
    const disabled = await entryOf('model.disable', `${org}/${model}`);
    byToken(disabled);
    expect([disabled.before.enabled, disabled.after.enabled]).toEqual([true, false]);

    // Canaries: add, remove.
    const canary = await admin('POST', `/admin/models/${modelPath(model)}/canaries`, {
      messages: [{ role: 'user', content: 'Say yes.' }],
      max_tokens: 4,
      expect: { contains: 'yes' },
    });
    expectStatus(canary, 201);
    const canaryAdded = await entryOf('canary.add', canary.body.id);
    byToken(canaryAdded);
    expect(canaryAdded.after).toMatchObject({ id: canary.body.id, model_id: model, expect: { contains: 'yes' } });
    expectStatus(await admin('DELETE', `/admin/canaries/${canary.body.id}`), 200);
    const canaryRemoved = await entryOf('canary.remove', canary.body.id);
    byToken(canaryRemoved);
    expect([canaryRemoved.before.id, canaryRemoved.after]).toEqual([canary.body.id, null]);

    // Devices: register (network, restricted; direct), lift the restriction, quarantine, trust, revoke.
    const device = await admin('POST', '/admin/devices', { name: uniq('audit-dev'), models: [model] });
    expectStatus(device, 201);
    secrets.push(device.body.token, sha256(device.body.token));
    const registered = await entryOf('device.create', device.body.id);
    byToken(registered);
    expect(registered.after).toMatchObject({
      id: device.body.id,
      pool: 'network',
      allowed_models: [model],
      trust: { state: 'probation' },
    });
    expect(device.body.token.startsWith(registered.after.token_prefix)).toBe(true);
    const direct = await admin('POST', '/admin/devices', { name: uniq('audit-direct'), org });
    expectStatus(direct, 201);
    secrets.push(direct.body.token, sha256(direct.body.token));
    expect((await entryOf('device.create', direct.body.id)).after).toMatchObject({ org, pool: 'direct' });

    const path = `/admin/devices/${device.body.id}`;
    expectStatus(await admin('PATCH', path, { models: null }), 200);
    const unrestricted = await entryOf('device.models', device.body.id);
    byToken(unrestricted);
    expect([unrestricted.before.allowed_models, unrestricted.after.allowed_models]).toEqual([[model], null]);

    expectStatus(await admin('PATCH', path, { trust: 'quarantined', reason: 'canned answers' }), 200);
    const quarantined = await entryOf('device.quarantine', device.body.id);
    byToken(quarantined);
    expect(quarantined.before.trust.state).toBe('probation');
    expect(quarantined.after.trust).toMatchObject({ state: 'quarantined', reason: 'canned answers' });
    expectStatus(await admin('PATCH', path, { trust: 'trusted' }), 200);
    const trusted = await entryOf('device.trust', device.body.id);
    byToken(trusted);
    expect([trusted.before.trust.state, trusted.after.trust.state]).toEqual(['quarantined', 'trusted']);

    expectStatus(await admin('DELETE', path), 200);
    const deviceRevoked = await entryOf('device.revoke', device.body.id);
    byToken(deviceRevoked);
    expect([deviceRevoked.before.status, deviceRevoked.after.status]).toEqual(['active', 'revoked']);
    assertOpenAIError(await admin('DELETE', `/admin/devices/${randomUUID()}`), 404, 'device_not_found');
  });

  test('through the dashboard: a session’s changes carry its own name, never its cookie', async () => {
    const org = uniq('audit-dash');
    expectStatus(await admin('POST', '/admin/orgs', { name: org }), 201);
    const signIn = async () => {
      const res = await fetch(`${api.url}/dashboard/session`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ token: ADMIN_TOKEN }),
      });
      expect(res.status).toBe(204);
      const cookie = /sy_admin_session=([^;]+)/.exec(res.headers.get('set-cookie') ?? '')!;
      secrets.push(cookie[1], sha256(cookie[1]));
      return { cookie: cookie[0], 'x-switchyard-csrf': '1' };
    };
    const first = await signIn();
    const patch = (headers: Record<string, string>, body: unknown) =>
      http('PATCH', `${api.url}/admin/orgs/${org}`, { headers, body });
    expectStatus(await patch(first, { weight: 3 }), 200);
    const one = await entryOf('org.update', org);
    expect(one.via).toBe('dashboard');
    expect(one.actor).toMatch(/^dashboard:[0-9a-f]{12}$/);
    expect([one.before.weight, one.after.weight]).toEqual([1, 3]);
    expectStatus(await patch(first, { weight: 4 }), 200);
    expect((await entryOf('org.update', org)).actor).toBe(one.actor);

    const second = await signIn();
    expectStatus(await patch(second, { weight: 5 }), 200);
    const other = await entryOf('org.update', org);
    expect(other.via).toBe('dashboard');
    expect(other.actor).not.toBe(one.actor);
    expect(other.actor).not.toBe(tokenActor);
  });

  test('through the CLI: each command that changes something, as cli:<user>@<host>', async () => {
    const run = async (...args: string[]) => {
      const res = await cli(['--json', ...args]);
      expect({ code: res.code, stderr: res.stderr, args }).toEqual(expect.objectContaining({ code: 0 }));
      return JSON.parse(res.stdout);
    };
    const byCli = (entry: any) => expect([entry.via, entry.actor]).toEqual(['cli', cliActor]);
    const org = uniq('audit-cli');
    await run('org', 'create', org);
    byCli(await entryOf('org.create', org));
    await run('org', 'limits', org, '--rpm', '5');
    const limits = await entryOf('org.update', org);
    byCli(limits);
    expect([limits.before.rpm_limit, limits.after.rpm_limit]).toEqual([null, 5]);
    // Showing the limits changes nothing.
    await run('org', 'limits', org);
    await run('org', 'network', org, 'off');
    expect((await entryOf('org.update', org)).after.network).toBe(false);
    expect(await count('org.update', org)).toBe(2);

    const key = await run('key', 'create', '--org', org, '--label', 'cli');
    secrets.push(key.key, sha256(key.key));
    byCli(await entryOf('key.create', key.id));
    const rotated = await run('key', 'rotate', key.id, '--grace', '0');
    secrets.push(rotated.key, sha256(rotated.key));
    byCli(await entryOf('key.rotate', key.id));
    await run('key', 'revoke', rotated.id);
    byCli(await entryOf('key.revoke', rotated.id));

    const id = uniq('audit-cli-model');
    await run('model', 'add', id);
    byCli(await entryOf('model.add', id));
    await run('model', 'network', id, 'on');
    byCli(await entryOf('model.update', id));
    await run('model', 'enable', id, '--org', org);
    byCli(await entryOf('model.enable', `${org}/${id}`));
    await run('model', 'disable', id, '--org', org);
    byCli(await entryOf('model.disable', `${org}/${id}`));
    const canary = await run('canary', 'add', id, '--prompt', 'Say yes.', '--contains', 'yes');
    byCli(await entryOf('canary.add', canary.id));
    await run('canary', 'remove', canary.id);
    byCli(await entryOf('canary.remove', canary.id));

    const device = await run('device', 'create', uniq('audit-cli-dev'), '--models', id);
    secrets.push(device.token, sha256(device.token));
    byCli(await entryOf('device.create', device.id));
    await run('device', 'models', device.id, '--clear');
    byCli(await entryOf('device.models', device.id));
    await run('device', 'trust', device.id, 'quarantined', '--reason', 'cli check');
    byCli(await entryOf('device.quarantine', device.id));
    await run('device', 'trust', device.id, 'trusted');
    byCli(await entryOf('device.trust', device.id));
    await run('device', 'revoke', device.id);
    byCli(await entryOf('device.revoke', device.id));

    // `audit` itself: the same page as the route, and a table.
    const page = await run('audit', '--kind', 'device', '--limit', '5');
    expect(page).toMatchObject({ object: 'list', has_more: true });
    expect(page.data.map((e: { kind: string; target: string }) => [e.kind, e.target])).toEqual([
      ['device.revoke', device.id],
      ['device.trust', device.id],
      ['device.quarantine', device.id],
      ['device.models', device.id],
      ['device.create', device.id],
    ]);
    const table = await cli(['audit', '--kind', 'org.update', '--limit', '2']);
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(/^ID\s+AT\s+VIA\s+ACTOR\s+KIND\s+TARGET\s+CHANGES/);
    expect(table.stdout).toContain(`network: true → false`);
    expect(table.stderr).toMatch(/^More: --after [0-9]+/);
    const bad = await cli(['audit', '--since', 'last week']);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/since.*\(invalid_request\)/);
  });

  test('GET /admin/audit pages newest first, by since and kind, and refuses bad parameters with 400', async () => {
    const first = await admin('GET', '/admin/audit?kind=org&limit=2');
    expectStatus(first, 200);
    expect(first.body).toMatchObject({ object: 'list', has_more: true });
    expect(first.body.data).toHaveLength(2);
    const ids = first.body.data.map((e: { id: string }) => BigInt(e.id));
    expect(ids[0] > ids[1]).toBe(true);
    expect([first.body.first_id, first.body.last_id]).toEqual(first.body.data.map((e: { id: string }) => e.id));
    const next = await admin('GET', `/admin/audit?kind=org&limit=2&after=${first.body.last_id}`);
    expectStatus(next, 200);
    expect(next.body.data.length).toBeGreaterThan(0);
    for (const entry of next.body.data) {
      expect(BigInt(entry.id) < ids[1]).toBe(true);
      expect(['org.create', 'org.update']).toContain(entry.kind);
    }

    const recent = await admin('GET', `/admin/audit?since=${encodeURIComponent(started.toISOString())}&limit=500`);
    expectStatus(recent, 200);
    const kinds = new Set(recent.body.data.map((e: { kind: string }) => e.kind));
    expect([...kinds].sort()).toEqual(
      [
        'canary.add',
        'canary.remove',
        'device.create',
        'device.models',
        'device.quarantine',
        'device.revoke',
        'device.trust',
        'key.budget',
        'key.create',
        'key.revoke',
        'key.rotate',
        'model.add',
        'model.disable',
        'model.enable',
        'model.update',
        'org.create',
        'org.update',
      ].sort(),
    );
    for (const entry of recent.body.data) {
      expect(Date.parse(entry.at)).toBeGreaterThanOrEqual(started.getTime());
    }
    const future = new Date(Date.now() + 3_600_000).toISOString();
    const none = await admin('GET', `/admin/audit?since=${encodeURIComponent(future)}`);
    expectStatus(none, 200);
    expect(none.body).toEqual({ object: 'list', data: [], first_id: null, last_id: null, has_more: false });

    for (const [query, param] of [
      ['since=yesterday', 'since'],
      ['since=2026-13-01', 'since'],
      ['kind=org.delete', 'kind'],
      ['kind=org.create&kind=org.update', 'kind'],
      ['limit=0', 'limit'],
      ['limit=501', 'limit'],
      ['after=abc', 'after'],
      ['colour=red', 'colour'],
    ]) {
      assertOpenAIError(await admin('GET', `/admin/audit?${query}`), 400, 'invalid_request', param);
    }
    assertOpenAIError(await http('GET', `${api.url}/admin/audit`), 401, 'invalid_admin_token', null);
  });

  test('no secret is anywhere in the log: key hashes, keys, device tokens, the admin token, session ids', async () => {
    expect(secrets.length).toBeGreaterThan(10);
    for (const secret of secrets) {
      const [row] = await db().$queryRawUnsafe<{ n: number }[]>(
        'SELECT count(*)::int AS n FROM audit_log t WHERE strpos(row_to_json(t)::text, $1) > 0',
        secret,
      );
      expect({ secret: secret.slice(0, 6), n: row.n }).toEqual({ secret: secret.slice(0, 6), n: 0 });
    }
    // And no field named for one.
    const [named] = await db().$queryRawUnsafe<{ n: number }[]>(
      `SELECT count(*)::int AS n FROM audit_log
       WHERE coalesce(before, '{}'::jsonb) ?| array['hash', 'token_hash', 'key', 'token']
          OR coalesce(after, '{}'::jsonb) ?| array['hash', 'token_hash', 'key', 'token']
          OR coalesce(after -> 'replacement', '{}'::jsonb) ?| array['hash', 'key']`,
    );
    expect(named.n).toBe(0);
  });
});
