import {
  cli,
  closeDb,
  createTenant,
  db,
  ensureCatalog,
  http,
  startApi,
  startDispatcher,
  uniq,
  waitOnline,
} from '../support/stack';
import type { Api, Dispatcher, Tenant } from '../support/stack';
import { FakeDevice } from '../support/fake-device';
import { adminClient, eventually, presenceOf } from './helpers';
import { assertOpenAIError } from '../foundation/helpers';
import { expectStatus } from '../support/expect-status';

/**
 * What an operator decides about who may serve what (issue 12): a device restricted to listed models,
 * an organization kept off the network, an organization that keeps one device per answer (resume off,
 * issue 37), an organization that follows the Nodea specification (compat, issue 38), an organization's
 * weight; through the admin HTTP API and the CLI, and as a device and a client then see it.
 */
describe('admin: device model restrictions, org network and resume switches, compat and weight', () => {
  let api: Api;
  let dispatcher: Dispatcher;
  let tenant: Tenant;
  const modelA = uniq('restrict-a');
  const modelB = uniq('restrict-b');
  const devices: FakeDevice[] = [];

  const admin = (method: string, path: string, body?: unknown) => adminClient(api)(method, path, body);

  beforeAll(async () => {
    await ensureCatalog([modelA, modelB]);
    tenant = await createTenant([modelA, modelB]);
    api = await startApi();
    dispatcher = await startDispatcher();
  });

  afterAll(async () => {
    devices.forEach((d) => d.close());
    await api?.stop();
    await dispatcher?.stop();
    await closeDb();
  });

  test('a restricted device is told which announced models are not allowed, and serves only its list', async () => {
    const created = await admin('POST', '/admin/devices', { name: uniq('restricted'), models: [modelA] });
    expectStatus(created, 201);
    expect(created.body.allowed_models).toEqual([modelA]);
    expect(created.body.pool).toBe('network');

    const device = await FakeDevice.connect(dispatcher.url, created.body.token, [modelA, modelB]);
    devices.push(device);
    expect(device.announceAck).toEqual({
      ok: true,
      device_id: created.body.id,
      pool: 'network',
      models: [modelA],
      refused: [{ model: modelB, reason: 'not_allowed' }],
    });
    await waitOnline([modelA], created.body.token);
    // the device is online for a model it may not serve
    expect(await presenceOf(modelB, created.body.id)).toBe(false);

    // Lifting the restriction lets the connected device serve what it announced, without reconnecting.
    const cleared = await admin('PATCH', `/admin/devices/${created.body.id}`, { models: null });
    expectStatus(cleared, 200);
    expect(cleared.body.allowed_models).toBeNull();
    await waitOnline([modelA, modelB], created.body.token);

    // Restricting it again takes the other model away from it.
    const narrowed = await admin('PATCH', `/admin/devices/${created.body.id}`, { models: [modelB] });
    expectStatus(narrowed, 200);
    expect(narrowed.body.allowed_models).toEqual([modelB]);
    await eventually('the device leaving the queue of the model taken from it', async () => {
      return !(await presenceOf(modelA, created.body.id));
    });
    expect(await presenceOf(modelB, created.body.id)).toBe(true);

    const row = await db().device.findUniqueOrThrow({ where: { id: created.body.id }, include: { models: true } });
    expect(row.modelsRestricted).toBe(true);
    expect(row.models.map((m) => m.modelId)).toEqual([modelB]);
    const listed = (await admin('GET', '/admin/devices')).body.data.find(
      (d: { id: string }) => d.id === created.body.id,
    );
    expect(listed.allowed_models).toEqual([modelB]);
  });

  test('bad restrictions are 400 (or 404 for what does not exist) and change nothing', async () => {
    const created = await admin('POST', '/admin/devices', { name: uniq('restricted'), models: [modelA] });
    expectStatus(created, 201);
    const path = `/admin/devices/${created.body.id}`;
    for (const [body, param] of [
      [{ models: [] }, 'models'],
      [{ models: 'a,b' }, 'models'],
      [{ models: [1] }, 'models[0]'],
      [{ models: ['has space'] }, 'models'],
      [{}, 'models'],
      [{ models: null, name: 'x' }, 'name'],
    ] as const) {
      assertOpenAIError(await admin('PATCH', path, body), 400, 'invalid_request', param);
    }
    assertOpenAIError(
      await admin('PATCH', path, { models: [uniq('not-in-catalog')] }),
      404,
      'model_not_found',
      'models',
    );
    assertOpenAIError(await admin('PATCH', '/admin/devices/not-a-uuid', { models: null }), 404, 'device_not_found');
    assertOpenAIError(
      await admin('POST', '/admin/devices', { name: uniq('d'), models: [uniq('not-in-catalog')] }),
      404,
      'model_not_found',
    );
    assertOpenAIError(await admin('POST', '/admin/devices', { name: uniq('d'), models: [] }), 400, 'invalid_request');
    const row = await db().device.findUniqueOrThrow({ where: { id: created.body.id }, include: { models: true } });
    expect(row.modelsRestricted).toBe(true);
    expect(row.models.map((m) => m.modelId)).toEqual([modelA]);
  });

  test("an org kept off the network gets 403 network_not_allowed for mode network, and back on it doesn't", async () => {
    const org = await createTenant([modelA]);
    const chat = () =>
      http('POST', `${api.url}/v1/chat/completions`, {
        headers: { authorization: `Bearer ${org.key}` },
        body: { model: modelA, mode: 'network', messages: [{ role: 'user', content: 'hi' }] },
      });
    const off = await admin('PATCH', `/admin/orgs/${org.org.name}`, { network: false });
    expectStatus(off, 200);
    expect(off.body).toEqual({
      id: org.org.id,
      name: org.org.name,
      limits: { rpm: null, concurrency: null, max_queued: null },
      network: false,
      resume: true,
      compat: 'openai',
      weight: 1,
      monthly_token_budget: null,
    });
    let last = await chat();
    await eventually('the api refusing the network', async () => {
      last = await chat();
      return last.status === 403;
    });
    assertOpenAIError(last, 403, 'network_not_allowed', 'mode');

    const on = await admin('PATCH', `/admin/orgs/${org.org.name}`, { network: true });
    expect(on.body.network).toBe(true);
    // Back on the network: no device serves modelA for it right now, so the answer is no device, not a refusal.
    await eventually('the api allowing the network again', async () => (await chat()).status !== 403);
    const listed = (await admin('GET', '/admin/orgs')).body.data.find((o: { id: string }) => o.id === org.org.id);
    expect(listed.network).toBe(true);
  });

  test("an org's resume switch is on by default; PATCH turns it off and on, GET shows it; a bad value is 400 and changes nothing", async () => {
    const org = await createTenant([]);
    const path = `/admin/orgs/${org.org.name}`;
    const listed = async () =>
      (await admin('GET', '/admin/orgs')).body.data.find((o: { id: string }) => o.id === org.org.id);
    const stored = () => db().organization.findUniqueOrThrow({ where: { id: org.org.id } });
    expect((await listed()).resume).toBe(true);
    expect((await stored()).resume).toBe(true);

    const off = await admin('PATCH', path, { resume: false });
    expectStatus(off, 200);
    expect(off.body).toEqual({
      id: org.org.id,
      name: org.org.name,
      limits: { rpm: null, concurrency: null, max_queued: null },
      network: true,
      resume: false,
      compat: 'openai',
      weight: 1,
      monthly_token_budget: null,
    });
    expect((await stored()).resume).toBe(false);
    expect((await listed()).resume).toBe(false);
    // Fields left out keep their value: another setting leaves resume off.
    const weighted = await admin('PATCH', path, { weight: 2 });
    expect([weighted.body.resume, weighted.body.weight]).toEqual([false, 2]);

    for (const resume of ['yes', 'false', 0, null]) {
      assertOpenAIError(await admin('PATCH', path, { resume }), 400, 'invalid_request', 'resume');
    }
    // A bad resume refuses the whole request: the valid field beside it is not written either.
    assertOpenAIError(await admin('PATCH', path, { weight: 4, resume: 'yes' }), 400, 'invalid_request', 'resume');
    const unchanged = await stored();
    expect([unchanged.resume, unchanged.weight]).toEqual([false, 2]);

    const on = await admin('PATCH', path, { resume: true });
    expectStatus(on, 200);
    expect(on.body.resume).toBe(true);
    expect((await listed()).resume).toBe(true);
  });

  test("an org's compat is openai by default; PATCH sets nodea and openai, GET shows it; a bad value is 400 and changes nothing", async () => {
    const org = await createTenant([]);
    const path = `/admin/orgs/${org.org.name}`;
    const listed = async () =>
      (await admin('GET', '/admin/orgs')).body.data.find((o: { id: string }) => o.id === org.org.id);
    const stored = () => db().organization.findUniqueOrThrow({ where: { id: org.org.id } });
    expect((await listed()).compat).toBe('openai');
    expect((await stored()).compat).toBe('openai');

    const nodea = await admin('PATCH', path, { compat: 'nodea' });
    expectStatus(nodea, 200);
    expect(nodea.body).toEqual({
      id: org.org.id,
      name: org.org.name,
      limits: { rpm: null, concurrency: null, max_queued: null },
      network: true,
      resume: true,
      compat: 'nodea',
      weight: 1,
      monthly_token_budget: null,
    });
    expect((await stored()).compat).toBe('nodea');
    expect((await listed()).compat).toBe('nodea');
    // Fields left out keep their value: another setting leaves compat as it is.
    const weighted = await admin('PATCH', path, { weight: 2 });
    expect([weighted.body.compat, weighted.body.weight]).toEqual(['nodea', 2]);

    for (const compat of ['Nodea', 'OPENAI', 'vllm', '', 1, true, null, ['nodea']]) {
      assertOpenAIError(await admin('PATCH', path, { compat }), 400, 'invalid_request', 'compat');
    }
    // A bad compat refuses the whole request: the valid field beside it is not written either.
    assertOpenAIError(await admin('PATCH', path, { weight: 4, compat: 'Nodea' }), 400, 'invalid_request', 'compat');
    const unchanged = await stored();
    expect([unchanged.compat, unchanged.weight]).toEqual(['nodea', 2]);

    const openai = await admin('PATCH', path, { compat: 'openai' });
    expectStatus(openai, 200);
    expect(openai.body.compat).toBe('openai');
    expect((await listed()).compat).toBe('openai');
  });

  test('an org weight is set between 1 and 100; anything else is 400', async () => {
    const set = await admin('PATCH', `/admin/orgs/${tenant.org.name}`, { weight: 3 });
    expectStatus(set, 200);
    expect(set.body.weight).toBe(3);
    expect((await db().organization.findUniqueOrThrow({ where: { id: tenant.org.id } })).weight).toBe(3);
    for (const weight of [0, 101, 1.5, '2', null]) {
      assertOpenAIError(
        await admin('PATCH', `/admin/orgs/${tenant.org.name}`, { weight }),
        400,
        'invalid_request',
        'weight',
      );
    }
    assertOpenAIError(
      await admin('PATCH', `/admin/orgs/${tenant.org.name}`, { network: 'no' }),
      400,
      'invalid_request',
      'network',
    );
    expect((await db().organization.findUniqueOrThrow({ where: { id: tenant.org.id } })).weight).toBe(3);
  });

  test('the CLI: device create --models, device models --set/--clear, org network, org resume, org compat, org weight', async () => {
    const created = await cli(['--json', 'device', 'create', uniq('cli-dev'), '--models', `${modelA},${modelB}`]);
    expect({ code: created.code, stderr: created.stderr }).toEqual(expect.objectContaining({ code: 0 }));
    const device = JSON.parse(created.stdout);
    expect(device.allowed_models).toEqual([modelA, modelB].sort());

    const set = await cli(['--json', 'device', 'models', device.id, '--set', modelB]);
    expect({ code: set.code, stderr: set.stderr }).toEqual(expect.objectContaining({ code: 0 }));
    expect(JSON.parse(set.stdout).allowed_models).toEqual([modelB]);
    const cleared = await cli(['device', 'models', device.id, '--clear']);
    expect({ code: cleared.code, stderr: cleared.stderr }).toEqual(expect.objectContaining({ code: 0 }));
    expect(cleared.stdout).toMatch(/^allowed_models\s+-$/m);
    expect((await db().device.findUniqueOrThrow({ where: { id: device.id } })).modelsRestricted).toBe(false);

    const both = await cli(['device', 'models', device.id, '--set', modelA, '--clear']);
    expect(both.code).toBe(1);
    expect(both.stderr).toMatch(/either --set <a,b> or --clear/);
    const unknown = await cli(['device', 'models', device.id, '--set', uniq('ghost-model')]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/is not in the catalog \(model_not_found\)/);

    const off = await cli(['--json', 'org', 'network', tenant.org.name, 'off']);
    expect({ code: off.code, stderr: off.stderr }).toEqual(expect.objectContaining({ code: 0 }));
    expect(JSON.parse(off.stdout).network).toBe(false);
    expect((await db().organization.findUniqueOrThrow({ where: { id: tenant.org.id } })).network).toBe(false);
    const on = await cli(['org', 'network', tenant.org.name, 'on']);
    expect({ code: on.code, stderr: on.stderr }).toEqual(expect.objectContaining({ code: 0 }));
    expect(on.stdout).toMatch(/^network\s+true$/m);
    const bad = await cli(['org', 'network', tenant.org.name, 'maybe']);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/must be on or off/);

    const keepOne = await cli(['--json', 'org', 'resume', tenant.org.name, 'off']);
    expect({ code: keepOne.code, stderr: keepOne.stderr }).toEqual(expect.objectContaining({ code: 0 }));
    expect(JSON.parse(keepOne.stdout).resume).toBe(false);
    expect((await db().organization.findUniqueOrThrow({ where: { id: tenant.org.id } })).resume).toBe(false);
    const listed = await cli(['--json', 'org', 'list']);
    expect(JSON.parse(listed.stdout).data.find((o: { id: string }) => o.id === tenant.org.id).resume).toBe(false);
    const resume = await cli(['org', 'resume', tenant.org.name, 'on']);
    expect({ code: resume.code, stderr: resume.stderr }).toEqual(expect.objectContaining({ code: 0 }));
    expect(resume.stdout).toMatch(/^resume\s+true$/m);
    const badResume = await cli(['org', 'resume', tenant.org.name, 'yes']);
    expect(badResume.code).toBe(1);
    expect(badResume.stderr).toMatch(/must be on or off/);
    expect((await db().organization.findUniqueOrThrow({ where: { id: tenant.org.id } })).resume).toBe(true);

    const nodea = await cli(['--json', 'org', 'compat', tenant.org.name, 'nodea']);
    expect({ code: nodea.code, stderr: nodea.stderr }).toEqual(expect.objectContaining({ code: 0 }));
    expect(JSON.parse(nodea.stdout).compat).toBe('nodea');
    expect((await db().organization.findUniqueOrThrow({ where: { id: tenant.org.id } })).compat).toBe('nodea');
    const listedCompat = await cli(['--json', 'org', 'list']);
    expect(JSON.parse(listedCompat.stdout).data.find((o: { id: string }) => o.id === tenant.org.id).compat).toBe(
      'nodea',
    );
    const openai = await cli(['org', 'compat', tenant.org.name, 'openai']);
    expect({ code: openai.code, stderr: openai.stderr }).toEqual(expect.objectContaining({ code: 0 }));
    expect(openai.stdout).toMatch(/^compat\s+openai$/m);
    const badCompat = await cli(['org', 'compat', tenant.org.name, 'Nodea']);
    expect(badCompat.code).toBe(1);
    expect(badCompat.stderr).toMatch(/must be openai or nodea/);
    expect((await db().organization.findUniqueOrThrow({ where: { id: tenant.org.id } })).compat).toBe('openai');

    const weight = await cli(['org', 'weight', tenant.org.name, '5']);
    expect({ code: weight.code, stderr: weight.stderr }).toEqual(expect.objectContaining({ code: 0 }));
    expect(weight.stdout).toMatch(/^weight\s+5$/m);
    const tooHeavy = await cli(['org', 'weight', tenant.org.name, '101']);
    expect(tooHeavy.code).toBe(1);
    expect(tooHeavy.stderr).toMatch(/weight .*100/);
    expect((await db().organization.findUniqueOrThrow({ where: { id: tenant.org.id } })).weight).toBe(5);
  });
});
