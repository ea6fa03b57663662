import {
  ADMIN_TOKEN,
  cli,
  closeDb,
  createDevice,
  createTenant,
  http,
  sleep,
  startApi,
  startDispatcher,
  uniq,
  waitOnline,
} from '../support/stack';
import type { Api, Dispatcher, Tenant } from '../support/stack';
import { FakeDevice } from '../support/fake-device';
import { assertOpenAIError } from '../foundation/helpers';
import { expectStatus } from '../support/expect-status';

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

/**
 * What an operator sees of the fleet now (issue 16): which devices are online and what each is doing,
 * what is queued for which model and for whom; through GET /admin/devices, /admin/devices/{id},
 * /admin/queues and the CLI's `device list`, `device show` and `queues`.
 */
describe('admin: live devices and queues', () => {
  let api: Api;
  let dispatcher: Dispatcher;
  let acme: Tenant;
  let globex: Tenant;
  const model = uniq('live-model');
  const fakes: FakeDevice[] = [];
  const pending: Promise<unknown>[] = [];

  const admin = (method: string, path: string) =>
    http(method, `${api.url}${path}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  const chat = (tenant: Tenant) =>
    http('POST', `${api.url}/v1/chat/completions`, {
      headers: { authorization: `Bearer ${tenant.key}` },
      body: { model, messages: [{ role: 'user', content: 'hello' }] },
    });

  async function until<T>(what: string, read: () => Promise<T>, ok: (value: T) => boolean): Promise<T> {
    const deadline = Date.now() + 15_000;
    for (;;) {
      const value = await read();
      if (ok(value)) {
        return value;
      }
      if (Date.now() > deadline) {
        throw new Error(`${what}: still ${JSON.stringify(value)}`);
      }
      await sleep(100);
    }
  }

  const queueOf = async () =>
    ((await admin('GET', '/admin/queues')).body.data as any[]).find((q) => q.model === model && q.pool === 'network');

  beforeAll(async () => {
    acme = await createTenant([model]);
    globex = await createTenant([model]);
    api = await startApi();
    dispatcher = await startDispatcher();
  });

  afterAll(async () => {
    fakes.forEach((d) => d.close());
    await Promise.allSettled(pending);
    await api?.stop();
    await dispatcher?.stop();
    await closeDb();
  });

  test('a connected device shows online with what it announced; a registered one that is away shows offline', async () => {
    const online = await createDevice();
    const away = await createDevice(acme.org.name);
    const device = await FakeDevice.connect(dispatcher.url, online.token, [model], { features: ['tools'] });
    fakes.push(device);
    await waitOnline([model], online.token);

    const shown = await until(
      'the device online',
      async () => (await admin('GET', `/admin/devices/${online.id}`)).body,
      (d) => d.online === true && d.models.length === 1,
    );
    expect(shown).toMatchObject({
      id: online.id,
      pool: 'network',
      org: null,
      status: 'active',
      allowed_models: null,
      online: true,
      models: [model],
      features: ['tools'],
      available: true,
      task: null,
    });
    expect(shown.connected_at).toMatch(ISO);
    expect(shown.last_heartbeat_at).toMatch(ISO);
    expect(typeof shown.dispatcher).toBe('string');
    expect(shown.dispatcher.length > 0).toBe(true);

    const list = await admin('GET', '/admin/devices');
    expectStatus(list, 200);
    const offline = list.body.data.find((d: { id: string }) => d.id === away.id);
    expect(offline).toMatchObject({
      pool: 'direct',
      org: acme.org.name,
      online: false,
      connected_at: null,
      last_heartbeat_at: null,
      dispatcher: null,
      models: [],
      features: [],
      available: null,
      task: null,
    });
    expect(list.body.data.find((d: { id: string }) => d.id === online.id)).toEqual(shown);

    assertOpenAIError(await admin('GET', '/admin/devices/not-a-uuid'), 404, 'device_not_found', 'id');
    assertOpenAIError(
      await admin('GET', '/admin/devices/00000000-0000-4000-8000-000000000000'),
      404,
      'device_not_found',
    );
  });

  test('queues show the task a busy device holds, and who waits behind it, org by org', async () => {
    const token = (await createDevice()).token;
    const device = await FakeDevice.connect(dispatcher.url, token, [model]);
    fakes.push(device);
    // The first test's device serves the same queue: take it away, so that one device serves it.
    fakes[0].close();
    await until('one device online for the model', queueOf, (q) => q?.devices_online === 1);

    const first = chat(acme);
    pending.push(first);
    const assignment = await device.nextAssignment();
    const address = assignment.task_address as string;
    const deviceId = device.announceAck.device_id as string;
    const busy = await until(
      'the device serving the task',
      async () => (await admin('GET', `/admin/devices/${deviceId}`)).body,
      (d) => d.task !== null,
    );
    expect(busy.task).toBe(address);

    // Behind it: two requests of acme, one of globex.
    const waiting = [chat(acme), chat(acme), chat(globex)];
    pending.push(...waiting);
    const queue = await until('three jobs waiting', queueOf, (q) => q?.waiting === 3);
    expect(queue).toMatchObject({
      model,
      pool: 'network',
      org: null,
      waiting: 3,
      devices_online: 1,
      devices_busy: 1,
    });
    expect({ ok: queue.oldest_wait_ms >= 0, queue }).toEqual(expect.objectContaining({ ok: true }));
    const lines = Object.fromEntries(queue.lines.map((l: any) => [l.org, l]));
    expect(Object.keys(lines).sort()).toEqual([acme.org.name, globex.org.name].sort());
    expect(lines[acme.org.name]).toMatchObject({ org_id: acme.org.id, waiting: 2 });
    expect(lines[globex.org.name]).toMatchObject({ org_id: globex.org.id, waiting: 1 });
    expect(lines[acme.org.name].oldest_wait_ms >= lines[globex.org.name].oldest_wait_ms - 1_000).toBe(true);

    // The CLI shows the same.
    const table = await cli(['queues']);
    expect({ code: table.code, stderr: table.stderr }).toEqual(expect.objectContaining({ code: 0 }));
    const row = table.stdout.split('\n').find((l) => l.startsWith(`${model} `));
    if (!row) {
      throw new Error(table.stdout);
    }
    expect(row).toMatch(/\bnetwork\s+-\s+3\s+\d+\s+1\s+1\s/);
    expect({ ok: row.includes(`${acme.org.name}:2`) && row.includes(`${globex.org.name}:1`), row }).toEqual(
      expect.objectContaining({ ok: true }),
    );
    const json = await cli(['--json', 'queues']);
    const cliQueue = JSON.parse(json.stdout).data.find((q: any) => q.model === model && q.pool === 'network');
    expect(cliQueue).toMatchObject({ waiting: 3, devices_online: 1, devices_busy: 1 });

    // Served one after another, the queue empties and the device is idle again.
    device.answer(address, ['ok']);
    for (let i = 0; i < 3; i++) {
      const next = await device.nextAssignment();
      device.answer(next.task_address, ['ok']);
    }
    for (const res of await Promise.all([first, ...waiting])) {
      expectStatus(res, 200);
    }
    const drained = await until('the queue drained', queueOf, (q) => q?.waiting === 0 && q.devices_busy === 0);
    expect(drained.lines).toEqual([]);
    expect(drained.oldest_wait_ms).toBeNull();
  });

  test('the CLI lists devices with their live state, and shows one', async () => {
    const { id, token } = await createDevice();
    const device = await FakeDevice.connect(dispatcher.url, token, [model], { features: ['json_schema'] });
    fakes.push(device);
    await waitOnline([model], token);
    const list = await until(
      'the device online in the CLI',
      async () => cli(['device', 'list']),
      (r) => r.stdout.split('\n').some((l) => l.startsWith(id) && / true /.test(l)),
    );
    expect(list.stdout.split('\n')[0]).toMatch(
      /^ID\s+NAME\s+ORG\s+POOL\s+TOKEN_PREFIX\s+STATUS\s+TRUST\s+ONLINE\s+AVAILABLE\s+MODELS\s+TASK\s+LAST_HEARTBEAT_AT$/,
    );
    const line = list.stdout.split('\n').find((l) => l.startsWith(id))!;
    expect(line).toMatch(
      new RegExp(`-\\s+network\\s+syd_\\S+\\s+active\\s+trusted\\s+true\\s+true\\s+${model}\\s+-\\s+\\d{4}-`),
    );

    const shown = await cli(['--json', 'device', 'show', id]);
    expect({ code: shown.code, stderr: shown.stderr }).toEqual(expect.objectContaining({ code: 0 }));
    expect(JSON.parse(shown.stdout)).toMatchObject({ id, online: true, models: [model], features: ['json_schema'] });

    device.close();
    const gone = await until(
      'the device offline',
      async () => JSON.parse((await cli(['--json', 'device', 'show', id])).stdout),
      (d) => d.online === false,
    );
    expect(gone).toMatchObject({ models: [], task: null, connected_at: null });

    const missing = await cli(['device', 'show', uniq('nope')]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/does not exist \(device_not_found\)/);
  });

  test('an unreachable Redis makes the live view a 503 in the CLI, not a crash', async () => {
    const res = await cli(['queues'], { REDIS_URL: 'redis://127.0.0.1:1' });
    expect(res.code).toBe(1);
    expect(res.stderr).toMatch(/Redis is unreachable\. \(service_unavailable\)/);
  });
});
