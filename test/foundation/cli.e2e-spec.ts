import assert from 'node:assert/strict';
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

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

/** A successful command: exit 0; returns stdout. */
function ok(res: CliResult, what: string): string {
  assert.equal(res.code, 0, `${what} failed (${res.code}):\n${res.stderr}`);
  assert.ok(res.stdout.length > 0, `${what} printed nothing`);
  return res.stdout;
}

/** A successful --json command: exactly one JSON object on one line, nothing on stderr. */
function okJson(res: CliResult, what: string): any {
  const out = ok(res, what);
  assert.equal(res.stderr, '', `${what} wrote to stderr`);
  assert.ok(out.endsWith('\n') && out.trim().split('\n').length === 1, `${what}: not one line: ${out}`);
  const value = JSON.parse(out);
  assert.ok(value && typeof value === 'object' && !Array.isArray(value), `${what}: not an object: ${out}`);
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
  assert.ok(row, `no row with ${column} ${value}`);
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
    assert.equal(human.stderr, '');
    assert.equal(record.name, orgA);
    assert.match(record.id, UUID_FORMAT);
    assert.match(record.created_at, ISO);
    const created = okJson(json, 'org create --json');
    expect(Object.keys(created).sort()).toEqual(['created_at', 'id', 'name']);
    assert.equal(created.name, orgB);
    assert.match(created.id, UUID_FORMAT);
    assert.equal((await db().organization.findUniqueOrThrow({ where: { name: orgA } })).id, record.id);
    assert.equal((await db().organization.findUniqueOrThrow({ where: { name: orgB } })).id, created.id);

    const [humanList, jsonList] = await Promise.all([cli(['org', 'list']), cli(['--json', 'org', 'list'])]);
    const { header, rows } = table(ok(humanList, 'org list'));
    assertColumns(header, ['ID', 'NAME', 'CREATED_AT', 'ACTIVE_KEYS', 'MODELS', 'DEVICES']);
    const row = rowOf(rows, 'NAME', orgA);
    expect([row.ID, row.CREATED_AT, row.ACTIVE_KEYS, row.MODELS, row.DEVICES]).toEqual([
      record.id,
      record.created_at,
      '0',
      '0',
      '0',
    ]);
    const list = okJson(jsonList, 'org list --json');
    assert.equal(list.object, 'list');
    const entry = list.data.find((o: { name: string }) => o.name === orgB);
    assert.ok(entry, `${orgB} not in org list`);
    expect([entry.id, entry.created_at, entry.active_keys, entry.models, entry.devices]).toEqual([
      created.id,
      created.created_at,
      0,
      0,
      0,
    ]);
  });

  test('key create, key list and key revoke', async () => {
    const { id: orgAId, name: orgA } = await newOrg();
    const [human, json] = await Promise.all([
      cli(['key', 'create', '--org', orgA, '--label', 'ci key']),
      cli(['--json', 'key', 'create', '--org', orgA, '--expires-in', '30d']),
    ]);
    const record = humanRecord(ok(human, 'key create'));
    assert.match(human.stderr, /not shown again/);
    assert.match(record.key, API_KEY_FORMAT);
    assert.match(record.id, UUID_FORMAT);
    assert.equal(record.org, orgA);
    assert.equal(record.label, 'ci key');
    assert.ok(record.key.startsWith(record.prefix));
    const created = okJson(json, 'key create --json');
    for (const field of ['id', 'key', 'prefix']) {
      assert.equal(typeof created[field], 'string', `no ${field} in ${json.stdout}`);
    }
    assert.match(created.key, API_KEY_FORMAT);
    assert.ok(created.key.startsWith(created.prefix));
    assert.equal(created.label, null);
    assert.ok(Math.abs(Date.parse(created.expires_at) - (Date.now() + 30 * 86_400_000)) < 60_000);

    for (const k of [record, created]) {
      const row = await db().apiKey.findUniqueOrThrow({ where: { id: k.id } });
      assert.equal(row.hash, sha256(k.key));
      assert.equal(row.orgId, orgAId);
      assert.equal(await tableContains('api_keys', k.key), false);
    }
    // The key printed by the human command works.
    const models = await http('GET', `${api.url}/v1/models`, { headers: bearer(record.key) });
    assert.equal(models.status, 200, models.text);

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
    assert.ok(data.every((k: { status: string }) => k.status === 'active'));
    for (const out of [humanList.stdout, jsonList.stdout]) {
      assert.ok(!out.includes(record.key) && !out.includes(created.key), 'key list prints a key');
    }

    const [humanRevoke, jsonRevoke] = await Promise.all([
      cli(['key', 'revoke', record.id]),
      cli(['--json', 'key', 'revoke', created.id]),
    ]);
    const revokedRecord = humanRecord(ok(humanRevoke, 'key revoke'));
    assert.equal(revokedRecord.id, record.id);
    assert.match(revokedRecord.revoked_at, ISO);
    const revoked = okJson(jsonRevoke, 'key revoke --json');
    assert.equal(revoked.id, created.id);
    assert.equal(revoked.prefix, created.prefix);
    assert.match(revoked.revoked_at, ISO);

    const rows = await db().apiKey.findMany({ where: { orgId: orgAId } });
    assert.equal(rows.length, 2);
    for (const row of rows) {
      assert.ok(row.revokedAt, `key ${row.id} not revoked`);
    }
    assert.equal(
      (await db().apiKey.findUniqueOrThrow({ where: { id: created.id } })).revokedAt?.toISOString(),
      revoked.revoked_at,
    );
  });

  test('model add, model list, model enable and model disable', async () => {
    const { id: orgAId, name: orgA } = await newOrg();
    const modelA = `${uniq('cli-vendor')}/Cli-Model-GGUF:Q4_K_M`;
    const modelB = `${uniq('cli-llama')}:7b`;
    const [human, json] = await Promise.all([
      cli(['model', 'add', modelA, '--max-output-tokens', '2048', '--owned-by', 'acme', '--network']),
      cli(['--json', 'model', 'add', modelB]),
    ]);
    const record = humanRecord(ok(human, 'model add'));
    assert.equal(record.id, modelA);
    assert.equal(record.max_output_tokens, '2048');
    assert.equal(record.owned_by, 'acme');
    assert.equal(record.network, 'true');
    const added = okJson(json, 'model add --json');
    expect(added).toEqual({
      id: modelB,
      max_output_tokens: null,
      owned_by: 'switchyard',
      network: false,
      created_at: added.created_at,
    });
    const rowA = await db().model.findUniqueOrThrow({ where: { id: modelA } });
    assert.equal(rowA.maxOutputTokens, 2048);
    assert.equal(rowA.ownedBy, 'acme');
    assert.equal(rowA.network, true);
    assert.equal(await db().model.count({ where: { id: modelB } }), 1);

    const [humanEnable, jsonEnable] = await Promise.all([
      cli(['model', 'enable', modelA, '--org', orgA]),
      cli(['--json', 'model', 'enable', modelB, '--org', orgA]),
    ]);
    const enabledRecord = humanRecord(ok(humanEnable, 'model enable'));
    expect(enabledRecord).toEqual({ model: modelA, org: orgA, enabled: 'true' });
    expect(okJson(jsonEnable, 'model enable --json')).toEqual({ model: modelB, org: orgA, enabled: true });
    assert.equal(await db().orgModel.count({ where: { orgId: orgAId, modelId: { in: [modelA, modelB] } } }), 2);

    // A client of orgA now sees both models.
    const key = await new AdminService(db()).createKey({ org: orgA });
    const seen = await http('GET', `${api.url}/v1/models`, { headers: bearer(key.key) });
    expect(seen.body.data.map((m: { id: string }) => m.id).sort()).toEqual([modelA, modelB].sort());

    const [humanList, jsonList] = await Promise.all([cli(['model', 'list']), cli(['--json', 'model', 'list'])]);
    const listed = table(ok(humanList, 'model list'));
    assertColumns(listed.header, ['ID', 'MAX_OUTPUT_TOKENS', 'OWNED_BY', 'NETWORK', 'CREATED_AT', 'ENABLED_FOR']);
    const modelRow = rowOf(listed.rows, 'ID', modelA);
    expect([modelRow.MAX_OUTPUT_TOKENS, modelRow.OWNED_BY, modelRow.NETWORK, modelRow.ENABLED_FOR]).toEqual([
      '2048',
      'acme',
      'true',
      orgA,
    ]);
    const entry = okJson(jsonList, 'model list --json').data.find((m: { id: string }) => m.id === modelB);
    expect(entry.enabled_for).toEqual([orgA]);
    assert.equal(entry.owned_by, 'switchyard');
    assert.equal(entry.network, false);

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
    assert.equal(badSwitch.code, 1, badSwitch.stderr);
    expect(badSwitch.stderr).toMatch(/must be on or off/);
    const unknown = await cli(['model', 'network', `${modelB}-nope`, 'on']);
    assert.notEqual(unknown.code, 0);
    expect(unknown.stderr).toMatch(/does not exist/);

    const [humanDisable, jsonDisable] = await Promise.all([
      cli(['model', 'disable', modelA, '--org', orgA]),
      cli(['--json', 'model', 'disable', modelB, '--org', orgA]),
    ]);
    expect(humanRecord(ok(humanDisable, 'model disable'))).toEqual({ model: modelA, org: orgA, enabled: 'false' });
    expect(okJson(jsonDisable, 'model disable --json')).toEqual({ model: modelB, org: orgA, enabled: false });
    assert.equal(await db().orgModel.count({ where: { orgId: orgAId } }), 0);
    const none = await http('GET', `${api.url}/v1/models`, { headers: bearer(key.key) });
    expect(none.body).toEqual({ object: 'list', data: [] });
    // Disabling is per organization: the catalog keeps the models.
    assert.equal(await db().model.count({ where: { id: { in: [modelA, modelB] } } }), 2);
  });

  test('org network on|off, device create --models, device models --set|--clear', async () => {
    const { id: orgId, name: org } = await newOrg();
    const off = okJson(await cli(['--json', 'org', 'network', org, 'off']), 'org network off');
    assert.equal(off.network, false);
    assert.equal((await db().organization.findUniqueOrThrow({ where: { id: orgId } })).network, false);
    const on = humanRecord(ok(await cli(['org', 'network', org, 'on']), 'org network on'));
    assert.equal(on.network, 'true');
    const bad = await cli(['org', 'network', org, 'maybe']);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /must be on or off/);

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
    assert.equal(cleared.allowed_models, null);
    assert.equal((await db().device.findUniqueOrThrow({ where: { id: created.id } })).modelsRestricted, false);
    const neither = await cli(['device', 'models', created.id]);
    assert.equal(neither.code, 1);
    assert.match(neither.stderr, /--set <a,b> or --clear/);
    const unknown = await cli(['device', 'create', uniq('cli-dev'), '--models', 'no/such-model']);
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr, /model 'no\/such-model' is not in the catalog \(model_not_found\)/);
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
    assert.match(human.stderr, /not shown again/);
    assert.match(record.token, DEVICE_TOKEN_FORMAT);
    assert.equal(record.name, directName);
    assert.equal(record.org, orgA);
    assert.equal(record.pool, 'direct');
    const created = okJson(json, 'device create --json');
    assert.match(created.id, UUID_FORMAT);
    assert.match(created.token, DEVICE_TOKEN_FORMAT);
    assert.equal(created.name, networkName);
    assert.equal(created.org, null);
    assert.equal(created.pool, 'network');

    for (const d of [record, created]) {
      const row = await db().device.findUniqueOrThrow({ where: { id: d.id } });
      assert.equal(row.tokenHash, sha256(d.token));
      assert.equal(await tableContains('devices', d.token), false);
      assert.equal(await tableContains('devices', d.token.slice(8)), false);
    }
    assert.equal((await db().device.findUniqueOrThrow({ where: { id: record.id } })).orgId, orgAId);
    assert.equal((await db().device.findUniqueOrThrow({ where: { id: created.id } })).orgId, null);

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
    assert.ok(record.token.startsWith(deviceRow.TOKEN_PREFIX));
    const entry = okJson(jsonList, 'device list --json').data.find((d: { id: string }) => d.id === created.id);
    assert.equal(entry.pool, 'network');
    assert.equal(entry.org, null);
    assert.equal(entry.status, 'active');
    assert.ok(created.token.startsWith(entry.token_prefix));
    for (const out of [humanList.stdout, jsonList.stdout]) {
      assert.ok(!out.includes(record.token) && !out.includes(created.token), 'device list prints a token');
    }

    const [humanRevoke, jsonRevoke] = await Promise.all([
      cli(['device', 'revoke', record.id]),
      cli(['--json', 'device', 'revoke', created.id]),
    ]);
    const revokedRecord = humanRecord(ok(humanRevoke, 'device revoke'));
    assert.equal(revokedRecord.id, record.id);
    assert.match(revokedRecord.revoked_at, ISO);
    const revoked = okJson(jsonRevoke, 'device revoke --json');
    assert.equal(revoked.id, created.id);
    assert.match(revoked.revoked_at, ISO);
    for (const id of [record.id, created.id]) {
      assert.ok((await db().device.findUniqueOrThrow({ where: { id } })).revokedAt, `device ${id} not revoked`);
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
    assert.equal(human.stderr, '');
    assert.equal(record.task_address, task.address);
    assert.equal(record.status, 'completed');
    assert.equal(record.model, modelA);
    assert.equal(record.mode, 'network');
    assert.equal(record.org, quiet.org.name);
    const shown = okJson(json, 'task show --json');
    assert.equal(shown.object, 'task');
    assert.equal(shown.task_address, task.address);
    assert.equal(shown.status, 'completed');
    assert.equal(shown.model, modelA);
    assert.equal(shown.mode, 'network');
    assert.equal(shown.api, 'openai');
    assert.equal(shown.stream, false);
    assert.equal(shown.org, quiet.org.name);
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
      assert.notEqual(res.code, 0, `${what} exited 0`);
      assert.equal(res.stdout, '', `${what} wrote to stdout: ${res.stdout}`);
      assert.match(res.stderr, /^error: /, `${what}: ${res.stderr}`);
      assert.match(res.stderr, pattern, `${what}: ${res.stderr}`);
      assert.doesNotMatch(res.stderr, /\n\s+at /, `${what} printed a stack trace`);
    });

    // A duplicate organization, with --json: the error is one OpenAI error object on stderr.
    const json = await cli(['--json', 'org', 'create', orgA]);
    assert.equal(json.code, 1);
    assert.equal(json.stdout, '');
    const body = JSON.parse(json.stderr);
    assert.equal(body.error.code, 'conflict');
    assert.equal(body.error.param, 'name');
    assert.match(body.error.message, /already exists/);

    expect(await snapshot()).toEqual(beforeState);
  });

  test('the switchyard binary: a command, a usage error and a configuration error, as real processes', async () => {
    const { name } = await newOrg();
    const listed = await cliProcess(['--json', 'org', 'list']);
    assert.equal(listed.code, 0, listed.stderr);
    assert.ok(okJson(listed, 'org list --json').data.some((o: { name: string }) => o.name === name));

    const usage = await cliProcess(['org', 'frobnicate']);
    assert.equal(usage.code, 1);
    assert.equal(usage.stdout, '');
    assert.match(usage.stderr, /unknown command 'frobnicate'/);

    const config = await cliProcess(['org', 'list'], { DATABASE_URL: 'mysql://nowhere/db' });
    assert.equal(config.code, 1);
    assert.equal(config.stdout, '');
    assert.match(config.stderr, /^invalid configuration: DATABASE_URL="mysql:\/\/nowhere\/db": must be a URL/);
  });
});
