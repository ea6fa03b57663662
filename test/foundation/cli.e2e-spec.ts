import { randomUUID } from 'node:crypto';
import { AdminService } from '@app/common';
import { cli, cliProcess, closeDb, createTenant, db, ensureCatalog, http, startApi, uniq } from '../support/stack';
import type { Api, CliResult, Tenant } from '../support/stack';
import {
  API_KEY_FORMAT,
  DEVICE_TOKEN_FORMAT,
  UUID_FORMAT,
  bearer,
  humanRecord,
  inBatches,
  insertTask,
  sha256,
  tableContains,
  stopApis,
} from './helpers';
import { expectStatus } from '../support/expect-status';

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

/** A successful command: exit 0; returns stdout. */
function ok(res: CliResult, what: string): string {
  expect({ code: res.code, message: `${what} failed (${res.code}):\n${res.stderr}` }).toEqual(
    expect.objectContaining({ code: 0 }),
  );
  expect({ ok: res.stdout.length > 0, message: `${what} printed nothing` }).toEqual(
    expect.objectContaining({ ok: true }),
  );
  return res.stdout;
}

/** A successful --json command: exactly one JSON object on one line, nothing on stderr. */
function okJson(res: CliResult, what: string): any {
  const out = ok(res, what);
  expect({ stderr: res.stderr, message: `${what} wrote to stderr` }).toEqual(expect.objectContaining({ stderr: '' }));
  expect({
    ok: out.endsWith('\n') && out.trim().split('\n').length === 1,
    message: `${what}: not one line: ${out}`,
  }).toEqual(expect.objectContaining({ ok: true }));
  const value = JSON.parse(out);
  expect({
    ok: Boolean(value && typeof value === 'object' && !Array.isArray(value)),
    message: `${what}: not an object: ${out}`,
  }).toEqual(expect.objectContaining({ ok: true }));
  return value;
}

/**
 * A human table: its header's columns and its rows keyed by column. Cells are split on runs of two
 * or more spaces (the renderer pads columns with at least two).
 */
function table(out: string): { header: string[]; rows: Record<string, string>[] } {
  const [first, ...lines] = out.trimEnd().split('\n');
  const header = first.split(/\s{2,}/);
  const rows = lines.map((line) => {
    const cells = line.split(/\s{2,}/);
    return Object.fromEntries(header.map((column, i) => [column, cells[i] ?? '']));
  });
  return { header, rows };
}

/** The row of a human table whose column has the value; fails when there is none. */
function rowOf(rows: Record<string, string>[], column: string, value: string): Record<string, string> {
  const row = rows.find((r) => r[column] === value);
  if (!row) {
    throw new Error(`no row with ${column} ${value}`);
  }
  return row;
}

/** Asserts that the table has (at least) these columns, in this order. */
function assertColumns(header: string[], columns: string[]) {
  expect(header.filter((c) => columns.includes(c))).toEqual(columns);
}

/** Every operator command of the admin CLI, in human and --json mode, and its error paths. */
describe('admin CLI', () => {
  let api: Api;
  /** An org for the error cases: one key, no models. */
  let quiet: Tenant;
  /** An organization of a test's own (each test is independent of the others). */
  const newOrg = async () => new AdminService(db()).createOrg(uniq('cli-org'));

  beforeAll(async () => {
    quiet = await createTenant([]);
    api = await startApi();
  });

  afterAll(async () => {
    await stopApis(api);
    await closeDb();
  });

  test('org create and org list', async () => {
    const orgA = uniq('cli-org-a');
    const orgB = uniq('cli-org-b');
    const [human, json] = await Promise.all([cli(['org', 'create', orgA]), cli(['--json', 'org', 'create', orgB])]);
    const record = humanRecord(ok(human, 'org create'));
    expect(human.stderr).toBe('');
    expect(record.name).toBe(orgA);
    expect(record.id).toMatch(UUID_FORMAT);
    expect(record.created_at).toMatch(ISO);
    const created = okJson(json, 'org create --json');
    expect(Object.keys(created).sort()).toEqual(['created_at', 'id', 'name']);
    expect(created.name).toBe(orgB);
    expect(created.id).toMatch(UUID_FORMAT);
    expect((await db().organization.findUniqueOrThrow({ where: { name: orgA } })).id).toBe(record.id);
    expect((await db().organization.findUniqueOrThrow({ where: { name: orgB } })).id).toBe(created.id);

    const [humanList, jsonList] = await Promise.all([cli(['org', 'list']), cli(['--json', 'org', 'list'])]);
    const { header, rows } = table(ok(humanList, 'org list'));
    assertColumns(header, [
      'ID',
      'NAME',
      'CREATED_AT',
      'NETWORK',
      'RESUME',
      'COMPAT',
      'ACTIVE_KEYS',
      'MODELS',
      'DEVICES',
    ]);
    const row = rowOf(rows, 'NAME', orgA);
    expect([
      row.ID,
      row.CREATED_AT,
      row.NETWORK,
      row.RESUME,
      row.COMPAT,
      row.ACTIVE_KEYS,
      row.MODELS,
      row.DEVICES,
    ]).toEqual([record.id, record.created_at, 'true', 'true', 'openai', '0', '0', '0']);
    const list = okJson(jsonList, 'org list --json');
    expect(list.object).toBe('list');
    const entry = list.data.find((o: { name: string }) => o.name === orgB);
    expect({ ok: Boolean(entry), message: `${orgB} not in org list` }).toEqual(expect.objectContaining({ ok: true }));
    expect([
      entry.id,
      entry.created_at,
      entry.resume,
      entry.compat,
      entry.active_keys,
      entry.models,
      entry.devices,
    ]).toEqual([created.id, created.created_at, true, 'openai', 0, 0, 0]);
  });

  test('key create, key list and key revoke', async () => {
    const { id: orgAId, name: orgA } = await newOrg();
    const [human, json] = await Promise.all([
      cli(['key', 'create', '--org', orgA, '--label', 'ci key']),
      cli(['--json', 'key', 'create', '--org', orgA, '--expires-in', '30d']),
    ]);
    const record = humanRecord(ok(human, 'key create'));
    expect(human.stderr).toMatch(/not shown again/);
    expect(record.key).toMatch(API_KEY_FORMAT);
    expect(record.id).toMatch(UUID_FORMAT);
    expect(record.org).toBe(orgA);
    expect(record.label).toBe('ci key');
    expect(record.key.startsWith(record.prefix)).toBe(true);
    const created = okJson(json, 'key create --json');
    for (const field of ['id', 'key', 'prefix']) {
      expect({ type: typeof created[field], message: `no ${field} in ${json.stdout}` }).toEqual(
        expect.objectContaining({ type: 'string' }),
      );
    }
    expect(created.key).toMatch(API_KEY_FORMAT);
    expect(created.key.startsWith(created.prefix)).toBe(true);
    expect(created.label).toBeNull();
    expect(Math.abs(Date.parse(created.expires_at) - (Date.now() + 30 * 86_400_000))).toBeLessThan(60_000);

    for (const k of [record, created]) {
      const row = await db().apiKey.findUniqueOrThrow({ where: { id: k.id } });
      expect(row.hash).toBe(sha256(k.key));
      expect(row.orgId).toBe(orgAId);
      expect(await tableContains('api_keys', k.key)).toBe(false);
    }
    // The key printed by the human command works.
    const models = await http('GET', `${api.url}/v1/models`, { headers: bearer(record.key) });
    expectStatus(models, 200);

    const [humanList, jsonList] = await Promise.all([
      cli(['key', 'list', '--org', orgA]),
      cli(['--json', 'key', 'list', '--org', orgA]),
    ]);
    const listed = table(ok(humanList, 'key list'));
    assertColumns(listed.header, ['ID', 'PREFIX', 'LABEL', 'STATUS', 'CREATED_AT', 'EXPIRES_AT', 'REVOKED_AT']);
    const keyRow = rowOf(listed.rows, 'ID', record.id);
    expect([keyRow.PREFIX, keyRow.LABEL, keyRow.STATUS]).toEqual([record.prefix, 'ci key', 'active']);
    const data = okJson(jsonList, 'key list --json').data;
    expect(data.map((k: { id: string }) => k.id).sort()).toEqual([record.id, created.id].sort());
    expect(data.every((k: { status: string }) => k.status === 'active')).toBe(true);
    for (const out of [humanList.stdout, jsonList.stdout]) {
      // key list prints a key
      expect(out).not.toContain(record.key);
      expect(out).not.toContain(created.key);
    }

    const [humanRevoke, jsonRevoke] = await Promise.all([
      cli(['key', 'revoke', record.id]),
      cli(['--json', 'key', 'revoke', created.id]),
    ]);
    const revokedRecord = humanRecord(ok(humanRevoke, 'key revoke'));
    expect(revokedRecord.id).toBe(record.id);
    expect(revokedRecord.revoked_at).toMatch(ISO);
    const revoked = okJson(jsonRevoke, 'key revoke --json');
    expect(revoked.id).toBe(created.id);
    expect(revoked.prefix).toBe(created.prefix);
    expect(revoked.revoked_at).toMatch(ISO);

    const rows = await db().apiKey.findMany({ where: { orgId: orgAId } });
    expect(rows).toHaveLength(2);
    for (const row of rows) {
      expect({ ok: Boolean(row.revokedAt), message: `key ${row.id} not revoked` }).toEqual(
        expect.objectContaining({ ok: true }),
      );
    }
    expect((await db().apiKey.findUniqueOrThrow({ where: { id: created.id } })).revokedAt?.toISOString()).toBe(
      revoked.revoked_at,
    );
  });

  test('model add, model kind, model list, model enable and model disable', async () => {
    const { id: orgAId, name: orgA } = await newOrg();
    const modelA = `${uniq('cli-vendor')}/Cli-Model-GGUF:Q4_K_M`;
    const modelB = `${uniq('cli-llama')}:7b`;
    const modelE = `${uniq('cli-embed')}:335m`;
    const [human, json, jsonEmbedding] = await Promise.all([
      cli(['model', 'add', modelA, '--max-output-tokens', '2048', '--owned-by', 'acme', '--network']),
      cli(['--json', 'model', 'add', modelB]),
      cli(['--json', 'model', 'add', modelE, '--kind', 'embedding']),
    ]);
    const record = humanRecord(ok(human, 'model add'));
    expect(record.id).toBe(modelA);
    expect(record.kind).toBe('chat');
    expect(record.max_output_tokens).toBe('2048');
    expect(record.owned_by).toBe('acme');
    expect(record.network).toBe('true');
    const added = okJson(json, 'model add --json');
    expect(added).toEqual({
      id: modelB,
      kind: 'chat',
      max_output_tokens: null,
      owned_by: 'switchyard',
      network: false,
      allowed_digests: [],
      created_at: added.created_at,
    });
    const rowA = await db().model.findUniqueOrThrow({ where: { id: modelA } });
    expect(rowA.maxOutputTokens).toBe(2048);
    expect(rowA.ownedBy).toBe('acme');
    expect(rowA.network).toBe(true);
    expect(await db().model.count({ where: { id: modelB } })).toBe(1);
    expect(okJson(jsonEmbedding, 'model add --kind embedding')).toMatchObject({ id: modelE, kind: 'embedding' });
    expect((await db().model.findUniqueOrThrow({ where: { id: modelE } })).kind).toBe('embedding');
    // A kind the catalog does not have is a usage error: nothing is added.
    const modelBad = uniq('cli-bad-kind');
    for (const value of ['Embedding', 'completion']) {
      const badKind = await cli(['model', 'add', modelBad, '--kind', value]);
      expect([badKind.code, badKind.stderr]).toEqual([1, expect.stringMatching(/--kind.*must be chat or embedding/)]);
    }
    expect(await db().model.count({ where: { id: modelBad } })).toBe(0);

    const [humanEnable, jsonEnable] = await Promise.all([
      cli(['model', 'enable', modelA, '--org', orgA]),
      cli(['--json', 'model', 'enable', modelB, '--org', orgA]),
    ]);
    const enabledRecord = humanRecord(ok(humanEnable, 'model enable'));
    expect(enabledRecord).toEqual({ model: modelA, org: orgA, enabled: 'true' });
    expect(okJson(jsonEnable, 'model enable --json')).toEqual({ model: modelB, org: orgA, enabled: true });
    expect(await db().orgModel.count({ where: { orgId: orgAId, modelId: { in: [modelA, modelB] } } })).toBe(2);

    // A client of orgA now sees both models.
    const key = await new AdminService(db()).createKey({ org: orgA });
    const seen = await http('GET', `${api.url}/v1/models`, { headers: bearer(key.key) });
    expect(seen.body.data.map((m: { id: string }) => m.id).sort()).toEqual([modelA, modelB].sort());

    const [humanList, jsonList] = await Promise.all([cli(['model', 'list']), cli(['--json', 'model', 'list'])]);
    const listed = table(ok(humanList, 'model list'));
    assertColumns(listed.header, [
      'ID',
      'KIND',
      'MAX_OUTPUT_TOKENS',
      'OWNED_BY',
      'NETWORK',
      'CREATED_AT',
      'ENABLED_FOR',
    ]);
    const modelRow = rowOf(listed.rows, 'ID', modelA);
    expect([
      modelRow.KIND,
      modelRow.MAX_OUTPUT_TOKENS,
      modelRow.OWNED_BY,
      modelRow.NETWORK,
      modelRow.ENABLED_FOR,
    ]).toEqual(['chat', '2048', 'acme', 'true', orgA]);
    expect(rowOf(listed.rows, 'ID', modelE).KIND).toBe('embedding');
    const entries = okJson(jsonList, 'model list --json').data;
    const entry = entries.find((m: { id: string }) => m.id === modelB);
    expect(entry.enabled_for).toEqual([orgA]);
    expect(entry.kind).toBe('chat');
    expect(entry.owned_by).toBe('switchyard');
    expect(entry.network).toBe(false);
    expect(entries.find((m: { id: string }) => m.id === modelE).kind).toBe('embedding');

    // model kind chat|embedding: the kind, nothing else.
    expect(okJson(await cli(['--json', 'model', 'kind', modelE, 'chat']), 'model kind chat')).toMatchObject({
      id: modelE,
      kind: 'chat',
      network: false,
    });
    expect(humanRecord(ok(await cli(['model', 'kind', modelE, 'embedding']), 'model kind embedding'))).toMatchObject({
      id: modelE,
      kind: 'embedding',
      network: 'false',
    });
    const badKind = await cli(['model', 'kind', modelE, 'Chat']);
    expect([badKind.code, badKind.stderr]).toEqual([1, expect.stringMatching(/must be chat or embedding/)]);
    const ghostKind = await cli(['model', 'kind', `${modelE}-nope`, 'chat']);
    expect([ghostKind.code, ghostKind.stderr]).toEqual([
      1,
      expect.stringMatching(/does not exist \(model_not_found\)/),
    ]);
    expect((await db().model.findUniqueOrThrow({ where: { id: modelE } })).kind).toBe('embedding');

    // model network on|off: the flag, nothing else.
    expect(okJson(await cli(['--json', 'model', 'network', modelB, 'on']), 'model network on')).toMatchObject({
      id: modelB,
      network: true,
      owned_by: 'switchyard',
    });
    expect(humanRecord(ok(await cli(['model', 'network', modelA, 'off']), 'model network off'))).toMatchObject({
      id: modelA,
      network: 'false',
      max_output_tokens: '2048',
    });
    expect((await db().model.findUniqueOrThrow({ where: { id: modelB } })).network).toBe(true);
    const badSwitch = await cli(['model', 'network', modelB, 'maybe']);
    expect({ code: badSwitch.code, stderr: badSwitch.stderr }).toEqual(expect.objectContaining({ code: 1 }));
    expect(badSwitch.stderr).toMatch(/must be on or off/);
    const unknown = await cli(['model', 'network', `${modelB}-nope`, 'on']);
    expect(unknown.code).not.toBe(0);
    expect(unknown.stderr).toMatch(/does not exist/);

    const [humanDisable, jsonDisable] = await Promise.all([
      cli(['model', 'disable', modelA, '--org', orgA]),
      cli(['--json', 'model', 'disable', modelB, '--org', orgA]),
    ]);
    expect(humanRecord(ok(humanDisable, 'model disable'))).toEqual({ model: modelA, org: orgA, enabled: 'false' });
    expect(okJson(jsonDisable, 'model disable --json')).toEqual({ model: modelB, org: orgA, enabled: false });
    expect(await db().orgModel.count({ where: { orgId: orgAId } })).toBe(0);
    const none = await http('GET', `${api.url}/v1/models`, { headers: bearer(key.key) });
    expect(none.body).toEqual({ object: 'list', data: [] });
    // Disabling is per organization: the catalog keeps the models.
    expect(await db().model.count({ where: { id: { in: [modelA, modelB] } } })).toBe(2);
  });

  test('org network on|off, org resume on|off, org compat openai|nodea, device create --models, device models --set|--clear', async () => {
    const { id: orgId, name: org } = await newOrg();
    const off = okJson(await cli(['--json', 'org', 'network', org, 'off']), 'org network off');
    expect(off.network).toBe(false);
    expect((await db().organization.findUniqueOrThrow({ where: { id: orgId } })).network).toBe(false);
    const on = humanRecord(ok(await cli(['org', 'network', org, 'on']), 'org network on'));
    expect(on.network).toBe('true');
    const bad = await cli(['org', 'network', org, 'maybe']);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/must be on or off/);

    // org resume on|off: the switch, nothing else.
    expect(okJson(await cli(['--json', 'org', 'resume', org, 'off']), 'org resume off')).toMatchObject({
      name: org,
      network: true,
      resume: false,
    });
    expect((await db().organization.findUniqueOrThrow({ where: { id: orgId } })).resume).toBe(false);
    const resumed = humanRecord(ok(await cli(['org', 'resume', org, 'on']), 'org resume on'));
    expect([resumed.resume, resumed.network]).toEqual(['true', 'true']);
    const badResume = await cli(['org', 'resume', org, 'yes']);
    expect(badResume.code).toBe(1);
    expect(badResume.stderr).toMatch(/must be on or off/);
    const ghost = await cli(['org', 'resume', uniq('ghost-org'), 'off']);
    expect(ghost.code).toBe(1);
    expect(ghost.stderr).toMatch(/does not exist \(org_not_found\)/);
    expect((await db().organization.findUniqueOrThrow({ where: { id: orgId } })).resume).toBe(true);

    // org compat openai|nodea: the setting, nothing else.
    expect(okJson(await cli(['--json', 'org', 'compat', org, 'nodea']), 'org compat nodea')).toMatchObject({
      name: org,
      network: true,
      resume: true,
      compat: 'nodea',
    });
    expect((await db().organization.findUniqueOrThrow({ where: { id: orgId } })).compat).toBe('nodea');
    const openai = humanRecord(ok(await cli(['org', 'compat', org, 'openai']), 'org compat openai'));
    expect([openai.compat, openai.resume, openai.network]).toEqual(['openai', 'true', 'true']);
    for (const value of ['Nodea', 'vllm']) {
      const badCompat = await cli(['org', 'compat', org, value]);
      expect(badCompat.code).toBe(1);
      expect(badCompat.stderr).toMatch(/must be openai or nodea/);
    }
    const ghostCompat = await cli(['org', 'compat', uniq('ghost-org'), 'nodea']);
    expect(ghostCompat.code).toBe(1);
    expect(ghostCompat.stderr).toMatch(/does not exist \(org_not_found\)/);
    expect((await db().organization.findUniqueOrThrow({ where: { id: orgId } })).compat).toBe('openai');

    const [a, b] = [uniq('cli-list-a'), uniq('cli-list-b')];
    await ensureCatalog([a, b]);
    const created = okJson(
      await cli(['--json', 'device', 'create', uniq('cli-dev'), '--models', `${b},${a}`]),
      'create',
    );
    expect(created.allowed_models).toEqual([a, b].sort());
    const set = okJson(await cli(['--json', 'device', 'models', created.id, '--set', a]), 'device models --set');
    expect(set.allowed_models).toEqual([a]);
    expect(await db().deviceModel.findMany({ where: { deviceId: created.id }, select: { modelId: true } })).toEqual([
      { modelId: a },
    ]);
    const cleared = okJson(await cli(['--json', 'device', 'models', created.id, '--clear']), 'device models --clear');
    expect(cleared.allowed_models).toBeNull();
    expect((await db().device.findUniqueOrThrow({ where: { id: created.id } })).modelsRestricted).toBe(false);
    const neither = await cli(['device', 'models', created.id]);
    expect(neither.code).toBe(1);
    expect(neither.stderr).toMatch(/--set <a,b> or --clear/);
    const unknown = await cli(['device', 'create', uniq('cli-dev'), '--models', 'no/such-model']);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/model 'no\/such-model' is not in the catalog \(model_not_found\)/);
  });

  test('org budget and key budget: a number of tokens or none, shown by org list and key list', async () => {
    const { id: orgId, name: org } = await newOrg();
    expect(okJson(await cli(['--json', 'org', 'budget', org, '2000000']), 'org budget')).toMatchObject({
      name: org,
      monthly_token_budget: 2_000_000,
    });
    expect((await db().organization.findUniqueOrThrow({ where: { id: orgId } })).monthlyTokenBudget).toBe(2_000_000n);
    const listed = okJson(await cli(['--json', 'org', 'list']), 'org list');
    expect(listed.data.find((o: { name: string }) => o.name === org).monthly_token_budget).toBe(2_000_000);
    const none = humanRecord(ok(await cli(['org', 'budget', org, 'none']), 'org budget none'));
    expect(none.monthly_token_budget).toBe('-');
    expect((await db().organization.findUniqueOrThrow({ where: { id: orgId } })).monthlyTokenBudget).toBeNull();
    for (const value of ['-5', '1.5', 'lots', '']) {
      const bad = await cli(['org', 'budget', org, value]);
      expect([value, bad.code]).toEqual([value, 1]);
      expect(bad.stderr).toMatch(/must be a number of tokens \(0 or more\) or none/);
    }
    const tooMuch = await cli(['org', 'budget', org, '10000000000000000']);
    expect(tooMuch.code).toBe(1);
    expect(tooMuch.stderr).toMatch(/monthly_token_budget/);
    expect((await db().organization.findUniqueOrThrow({ where: { id: orgId } })).monthlyTokenBudget).toBeNull();

    const key = okJson(await cli(['--json', 'key', 'create', '--org', org]), 'key create');
    expect(okJson(await cli(['--json', 'key', 'budget', key.id, '0']), 'key budget 0')).toMatchObject({
      id: key.id,
      monthly_token_budget: 0,
    });
    const keys = okJson(await cli(['--json', 'key', 'list', '--org', org]), 'key list');
    expect(keys.data[0].monthly_token_budget).toBe(0);
    const ghost = await cli(['key', 'budget', randomUUID(), '5']);
    expect(ghost.code).toBe(1);
    expect(ghost.stderr).toMatch(/key_not_found/);
  });

  test('device create, device list and device revoke', async () => {
    const { id: orgAId, name: orgA } = await newOrg();
    const directName = uniq('cli-dev-direct');
    const networkName = uniq('cli-dev-network');
    const [human, json] = await Promise.all([
      cli(['device', 'create', directName, '--org', orgA]),
      cli(['--json', 'device', 'create', networkName]),
    ]);
    const record = humanRecord(ok(human, 'device create'));
    expect(human.stderr).toMatch(/not shown again/);
    expect(record.token).toMatch(DEVICE_TOKEN_FORMAT);
    expect(record.name).toBe(directName);
    expect(record.org).toBe(orgA);
    expect(record.pool).toBe('direct');
    const created = okJson(json, 'device create --json');
    expect(created.id).toMatch(UUID_FORMAT);
    expect(created.token).toMatch(DEVICE_TOKEN_FORMAT);
    expect(created.name).toBe(networkName);
    expect(created.org).toBeNull();
    expect(created.pool).toBe('network');

    for (const d of [record, created]) {
      const row = await db().device.findUniqueOrThrow({ where: { id: d.id } });
      expect(row.tokenHash).toBe(sha256(d.token));
      expect(await tableContains('devices', d.token)).toBe(false);
      expect(await tableContains('devices', d.token.slice(8))).toBe(false);
    }
    expect((await db().device.findUniqueOrThrow({ where: { id: record.id } })).orgId).toBe(orgAId);
    expect((await db().device.findUniqueOrThrow({ where: { id: created.id } })).orgId).toBeNull();

    const [humanList, jsonList] = await Promise.all([cli(['device', 'list']), cli(['--json', 'device', 'list'])]);
    const listed = table(ok(humanList, 'device list'));
    assertColumns(listed.header, ['ID', 'NAME', 'ORG', 'POOL', 'TOKEN_PREFIX', 'STATUS']);
    const deviceRow = rowOf(listed.rows, 'ID', record.id);
    expect([deviceRow.NAME, deviceRow.ORG, deviceRow.POOL, deviceRow.STATUS]).toEqual([
      directName,
      orgA,
      'direct',
      'active',
    ]);
    expect(record.token.startsWith(deviceRow.TOKEN_PREFIX)).toBe(true);
    const entry = okJson(jsonList, 'device list --json').data.find((d: { id: string }) => d.id === created.id);
    expect(entry.pool).toBe('network');
    expect(entry.org).toBeNull();
    expect(entry.status).toBe('active');
    expect(created.token.startsWith(entry.token_prefix)).toBe(true);
    for (const out of [humanList.stdout, jsonList.stdout]) {
      // device list prints a token
      expect(out).not.toContain(record.token);
      expect(out).not.toContain(created.token);
    }

    const [humanRevoke, jsonRevoke] = await Promise.all([
      cli(['device', 'revoke', record.id]),
      cli(['--json', 'device', 'revoke', created.id]),
    ]);
    const revokedRecord = humanRecord(ok(humanRevoke, 'device revoke'));
    expect(revokedRecord.id).toBe(record.id);
    expect(revokedRecord.revoked_at).toMatch(ISO);
    const revoked = okJson(jsonRevoke, 'device revoke --json');
    expect(revoked.id).toBe(created.id);
    expect(revoked.revoked_at).toMatch(ISO);
    for (const id of [record.id, created.id]) {
      expect({
        ok: Boolean((await db().device.findUniqueOrThrow({ where: { id } })).revokedAt),
        message: `device ${id} not revoked`,
      }).toEqual(expect.objectContaining({ ok: true }));
    }
  });

  test('task show', async () => {
    const modelA = `${uniq('cli-vendor')}/Cli-Model-GGUF:Q4_K_M`;
    await new AdminService(db()).addModel({ id: modelA });
    const task = await insertTask(quiet.org.id, modelA);
    const [human, json] = await Promise.all([
      cli(['task', 'show', task.address]),
      cli(['--json', 'task', 'show', task.address]),
    ]);
    const record = humanRecord(ok(human, 'task show'));
    expect(human.stderr).toBe('');
    expect(record.task_address).toBe(task.address);
    expect(record.status).toBe('completed');
    expect(record.model).toBe(modelA);
    expect(record.mode).toBe('network');
    expect(record.kind).toBe('chat');
    expect(record.org).toBe(quiet.org.name);
    const shown = okJson(json, 'task show --json');
    expect(shown.object).toBe('task');
    expect(shown.task_address).toBe(task.address);
    expect(shown.status).toBe('completed');
    expect(shown.model).toBe(modelA);
    expect(shown.mode).toBe('network');
    expect(shown.api).toBe('openai');
    expect(shown.kind).toBe('chat');
    expect(shown.stream).toBe(false);
    expect(shown.org).toBe(quiet.org.name);
  });

  test('errors: non-zero exit, a message on stderr, nothing on stdout, nothing changed', async () => {
    const { name: orgA } = await newOrg();
    const ghostOrg = uniq('ghost-org');
    const badModel = uniq('bad-model');
    const quietOrg = quiet.org.name;
    const snapshot = async () => ({
      orgA: await db().organization.count({ where: { name: orgA } }),
      ghostOrg: await db().organization.count({ where: { name: ghostOrg } }),
      quietKeys: await db().apiKey.count({ where: { orgId: quiet.org.id } }),
      quietRevoked: await db().apiKey.count({ where: { orgId: quiet.org.id, revokedAt: { not: null } } }),
      quietModels: await db().orgModel.count({ where: { orgId: quiet.org.id } }),
      badModel: await db().model.count({ where: { id: badModel } }),
      tasks: await db().task.count({ where: { orgId: quiet.org.id } }),
    });
    const beforeState = await snapshot();

    const cases: [string[], RegExp][] = [
      [['key', 'create', '--org', ghostOrg], /does not exist.*\(org_not_found\)/],
      [['key', 'create', '--org', quietOrg, '--expires-in', '3x'], /expires_in/],
      [['model', 'add', badModel, '--max-output-tokens', '0'], /--max-output-tokens/],
      [['key', 'revoke', randomUUID()], /does not exist.*\(key_not_found\)/],
      [['device', 'revoke', randomUUID()], /does not exist.*\(device_not_found\)/],
      [['task', 'show', `network:${randomUUID()}`], /does not exist.*\(task_not_found\)/],
      [['key', 'create'], /required option '--org/],
    ];
    const results = await inBatches(
      cases.map(
        ([args]) =>
          () =>
            cli(args),
      ),
    );
    results.forEach((res, i) => {
      const [args, pattern] = cases[i];
      const what = `switchyard ${args.join(' ')}`;
      expect({ code: res.code, message: `${what} exited 0` }).not.toEqual(expect.objectContaining({ code: 0 }));
      expect({ stdout: res.stdout, message: `${what} wrote to stdout: ${res.stdout}` }).toEqual(
        expect.objectContaining({ stdout: '' }),
      );
      expect({ stderr: res.stderr, message: `${what}: ${res.stderr}` }).toEqual(
        expect.objectContaining({ stderr: expect.stringMatching(/^error: /) }),
      );
      expect({ stderr: res.stderr, message: `${what}: ${res.stderr}` }).toEqual(
        expect.objectContaining({ stderr: expect.stringMatching(pattern) }),
      );
      expect({ stderr: res.stderr, message: `${what} printed a stack trace` }).not.toEqual(
        expect.objectContaining({ stderr: expect.stringMatching(/\n\s+at /) }),
      );
    });

    // A duplicate organization, with --json: the error is one OpenAI error object on stderr.
    const json = await cli(['--json', 'org', 'create', orgA]);
    expect(json.code).toBe(1);
    expect(json.stdout).toBe('');
    const body = JSON.parse(json.stderr);
    expect(body.error.code).toBe('conflict');
    expect(body.error.param).toBe('name');
    expect(body.error.message).toMatch(/already exists/);

    expect(await snapshot()).toEqual(beforeState);
  });

  test('the switchyard binary: a command, a usage error and a configuration error, as real processes', async () => {
    const { name } = await newOrg();
    const listed = await cliProcess(['--json', 'org', 'list']);
    expect({ code: listed.code, stderr: listed.stderr }).toEqual(expect.objectContaining({ code: 0 }));
    expect(okJson(listed, 'org list --json').data.some((o: { name: string }) => o.name === name)).toBe(true);

    const usage = await cliProcess(['org', 'frobnicate']);
    expect(usage.code).toBe(1);
    expect(usage.stdout).toBe('');
    expect(usage.stderr).toMatch(/unknown command 'frobnicate'/);

    const config = await cliProcess(['org', 'list'], { DATABASE_URL: 'mysql://nowhere/db' });
    expect(config.code).toBe(1);
    expect(config.stdout).toBe('');
    expect(config.stderr).toMatch(/^invalid configuration: DATABASE_URL="mysql:\/\/nowhere\/db": must be a URL/);
  });
});
