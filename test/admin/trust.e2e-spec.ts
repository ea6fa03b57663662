import {
  cli,
  closeDb,
  createDevice,
  createTenant,
  db,
  http,
  startApi,
  startDispatcher,
  uniq,
  waitOnline,
} from '../support/stack';
import type { Api, Dispatcher, Tenant } from '../support/stack';
import { FakeDevice } from '../support/fake-device';
import { adminClient, eventually, presenceOf } from './helpers';
import { USAGE_DISAGREEMENTS, USAGE_WINDOW } from '../../apps/dispatcher/src/devices/usage-window';
import { assertOpenAIError } from '../foundation/helpers';
import { expectStatus } from '../support/expect-status';

/**
 * A network device's trust (issue 35): an operator quarantines it, and it is given no network task,
 * also while it stays connected; trusted again, it serves again. Direct devices are never held back by
 * trust. Through the admin HTTP API and the CLI, as the device and a client then see it.
 */
describe('admin: quarantining a network device, and trusting it again', () => {
  let api: Api;
  let dispatcher: Dispatcher;
  let tenant: Tenant;
  const model = uniq('trust');
  const devices: FakeDevice[] = [];

  const admin = (method: string, path: string, body?: unknown) => adminClient(api)(method, path, body);
  const chat = () =>
    http('POST', `${api.url}/v1/chat/completions`, {
      headers: { authorization: `Bearer ${tenant.key}` },
      body: { model, messages: [{ role: 'user', content: 'hi' }] },
    });
  const announce = (device: FakeDevice) =>
    device.socket.timeout(5_000).emitWithAck('announce', {
      agent_version: 'fake-1',
      backend: 'sim',
      models: [model],
      features: [],
      available: true,
      running_task: null,
      identities: [],
    });

  beforeAll(async () => {
    tenant = await createTenant([model]);
    [api, dispatcher] = await Promise.all([startApi(), startDispatcher()]);
  });

  afterAll(async () => {
    devices.forEach((d) => d.close());
    await Promise.all([api?.stop(), dispatcher?.stop()]);
    await closeDb();
  });

  test('a quarantined device loses its models while connected, is refused them, and serves again once trusted', async () => {
    const { id, token } = await createDevice();
    const device = await FakeDevice.connect(dispatcher.url, token, [model]);
    devices.push(device);
    await waitOnline([model], token);
    const listed = await admin('GET', `/admin/devices/${id}`);
    // Registered on probation; its model has no canaries, so it was trusted when it announced.
    expect(listed.body.trust).toEqual({
      state: 'trusted',
      reason: 'trusted on announce: no canaries for its models',
      changed_at: expect.any(String),
      canaries_passed: 0,
      canaries_failed: 0,
      last_canary_at: null,
    });

    const quarantined = await admin('PATCH', `/admin/devices/${id}`, {
      trust: 'quarantined',
      reason: 'answers with another model',
    });
    expectStatus(quarantined, 200);
    expect(quarantined.body.trust).toEqual({
      state: 'quarantined',
      reason: 'answers with another model',
      changed_at: expect.any(String),
      canaries_passed: 0,
      canaries_failed: 0,
      last_canary_at: null,
    });
    await eventually('the device losing its model', async () => !(await presenceOf(model, id)));
    expect(await announce(device)).toEqual({
      ok: true,
      device_id: id,
      pool: 'network',
      models: [],
      refused: [{ model, reason: 'quarantined' }],
    });
    // Its only device quarantined, the model has no device for the client.
    assertOpenAIError(await chat(), 503, 'no_device_available');
    const row = await db().device.findUniqueOrThrow({ where: { id } });
    expect([row.trust, row.trustReason]).toEqual(['quarantined', 'answers with another model']);
    expect(api.proc.stdout).toContain('device trust changed by an admin');

    const trusted = await admin('PATCH', `/admin/devices/${id}`, { trust: 'trusted' });
    expectStatus(trusted, 200);
    expect(trusted.body.trust).toMatchObject({ state: 'trusted', reason: null });
    await waitOnline([model], token);
    const pending = chat();
    const task = await device.nextAssignment();
    device.answer(task.task_address, ['fine']);
    expectStatus(await pending, 200);
  });

  test('a device whose usage reports keep claiming tokens nobody received is quarantined; an honest one is not', async () => {
    // A model of its own: the devices of the other tests serve `model` and would take some of its tasks.
    const audited = uniq('trust-audit');
    const org = await createTenant([audited]);
    const honest = await createDevice();
    const inflating = await createDevice();
    const fair = await FakeDevice.connect(dispatcher.url, honest.token, [audited]);
    const liar = await FakeDevice.connect(dispatcher.url, inflating.token, [audited]);
    devices.push(fair, liar);
    await waitOnline([audited], honest.token);
    await waitOnline([audited], inflating.token);
    const served = { fair: 0, liar: 0 };
    // Each device answers what it is given: the honest one with what it sent, the other with 400 tokens for 2 bytes.
    for (let i = 0; i < 40 && served.liar < USAGE_DISAGREEMENTS; i++) {
      const pending = http('POST', `${api.url}/v1/chat/completions`, {
        headers: { authorization: `Bearer ${org.key}` },
        body: { model: audited, messages: [{ role: 'user', content: `hi ${i}` }], max_tokens: 512 },
      });
      const [device, task] = await FakeDevice.firstAssigned([fair, liar]);
      if (device === fair) {
        fair.answer(task.task_address, ['ok', ' then']);
      } else {
        liar.delta(task.task_address, 0, 'ok');
        liar.done(task.task_address, 1, { prompt_tokens: 3, completion_tokens: 400, total_tokens: 403 });
      }
      served[device === fair ? 'fair' : 'liar']++;
      expectStatus(await pending, 200);
    }
    expect(served.liar).toBe(USAGE_DISAGREEMENTS);
    await eventually('the inflating device losing its model', async () => !(await presenceOf(audited, inflating.id)));
    const row = await db().device.findUniqueOrThrow({ where: { id: inflating.id } });
    expect([row.trust, row.trustReason]).toEqual([
      'quarantined',
      `its usage reports claimed tokens beyond the output relayed in ${USAGE_DISAGREEMENTS} of its last ${USAGE_WINDOW} tasks`,
    ]);
    expect(dispatcher.proc.stdout).toContain('device quarantined');
    expect((await db().device.findUniqueOrThrow({ where: { id: honest.id } })).trust).toBe('trusted');
    expect(await presenceOf(audited, honest.id)).toBe(true);
  });

  test('bad or misplaced changes are 400 (404 for what does not exist) and change nothing', async () => {
    const { id } = await createDevice();
    const path = `/admin/devices/${id}`;
    for (const [body, param] of [
      [{ trust: 'maybe' }, 'trust'],
      [{ trust: true }, 'trust'],
      [{ reason: 'why' }, 'reason'],
      [{ trust: 'quarantined', reason: '' }, 'reason'],
      [{ trust: 'quarantined', reason: 'x'.repeat(201) }, 'reason'],
      [{}, 'models'],
    ] as const) {
      assertOpenAIError(await admin('PATCH', path, body), 400, 'invalid_request', param);
    }
    // A valid trust with models that do not exist: nothing of either is made.
    assertOpenAIError(
      await admin('PATCH', path, { trust: 'quarantined', models: [uniq('not-in-catalog')] }),
      404,
      'model_not_found',
    );
    assertOpenAIError(await admin('PATCH', '/admin/devices/not-a-uuid', { trust: 'trusted' }), 404, 'device_not_found');
    // Registered, never announced: on probation still.
    expect((await db().device.findUniqueOrThrow({ where: { id } })).trust).toBe('probation');

    // A direct device is its organization's own: trust does not apply to it.
    const direct = await createDevice(tenant.org.name);
    assertOpenAIError(
      await admin('PATCH', `/admin/devices/${direct.id}`, { trust: 'quarantined' }),
      400,
      'invalid_request',
      'trust',
    );
    expect((await db().device.findUniqueOrThrow({ where: { id: direct.id } })).trust).toBe('trusted');
  });

  test('the CLI quarantines and trusts as the API does, and device list shows the trust', async () => {
    const { id } = await createDevice();
    const set = await cli(['--json', 'device', 'trust', id, 'quarantined', '--reason', 'canned answers']);
    expect(set.code).toBe(0);
    expect(JSON.parse(set.stdout).trust).toMatchObject({ state: 'quarantined', reason: 'canned answers' });
    const table = await cli(['device', 'list']);
    expect(table.stdout.split('\n')[0]).toMatch(/\bTRUST\b/);
    expect(table.stdout.split('\n').find((l) => l.startsWith(id))).toMatch(/ quarantined /);
    const bad = await cli(['device', 'trust', id, 'maybe']);
    expect([bad.code, bad.stderr]).toEqual([1, expect.stringContaining('trust must be one of trusted, quarantined')]);
    const back = await cli(['--json', 'device', 'trust', id, 'trusted']);
    expect(JSON.parse(back.stdout).trust.state).toBe('trusted');
  });
});
