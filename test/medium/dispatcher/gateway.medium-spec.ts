import { io } from 'socket.io-client';
import { AdminService, PROTOCOL_VERSION, createRedis, decodePresenceMember, KeySpace } from '@app/common';
import { FakeDevice } from '../../support/fake-device';
import {
  REDIS_URL,
  createDevice,
  createTenant,
  db,
  deviceIdOf,
  http,
  sleep,
  uniq,
  waitOnline,
  waitTerminal,
} from '../../support/stack';
import { relayApps } from '../support/apps';

/** The `/devices` namespace with real socket.io clients: handshake, announce, presence, validation. */
describe('device gateway (dispatcher)', () => {
  const apps = relayApps();
  const { devices } = apps;
  const redis = createRedis(REDIS_URL);

  afterAll(() => redis.disconnect());

  /** What the handshake answers for `auth`: 'connected', or the error message of connect_error. */
  function handshake(auth: object | undefined, namespace = '/devices'): Promise<string> {
    const socket = io(`${apps.dispatcher.url}${namespace}`, {
      transports: ['websocket'],
      auth: auth as Record<string, unknown>,
      reconnection: false,
      forceNew: true,
    });
    return new Promise((resolve) => {
      socket.once('connect', () => {
        socket.disconnect();
        resolve('connected');
      });
      socket.once('connect_error', (err) => {
        socket.disconnect();
        resolve(err.message);
      });
    });
  }

  const presence = async (pool: string, model: string) =>
    (await redis.zrangebyscore(KeySpace.of(redis).presence(pool, model), Date.now(), '+inf')).map(decodePresenceMember);

  it('refuses a handshake without a valid device token', async () => {
    const { token } = await createDevice();
    expect(await handshake(undefined)).toBe('invalid_device_token');
    expect(await handshake({ token: 'syd_' + 'x'.repeat(40), protocol: PROTOCOL_VERSION })).toBe(
      'invalid_device_token',
    );
    expect(await handshake({ token: 'not a token', protocol: PROTOCOL_VERSION })).toBe('invalid_device_token');
    expect(await handshake({ token, protocol: PROTOCOL_VERSION })).toBe('connected');
  });

  it('an announce is acknowledged with the device and its pool, and publishes its presence with features', async () => {
    const model = uniq('medium-gw');
    const tenant = await createTenant([model]);
    const direct = await createDevice(tenant.org.name);
    const fake = await FakeDevice.connect(apps.dispatcher.url, direct.token, [model], { features: ['tools', 'n'] });
    devices.push(fake);
    await waitOnline([model], direct.token, { pool: tenant.org.id });
    expect(await presence(tenant.org.id, model)).toEqual([{ deviceId: direct.id, features: ['n', 'tools'] }]);
    const again = await fake.socket.timeout(5_000).emitWithAck('announce', {
      agent_version: 'fake-1',
      backend: 'sim',
      models: [model],
      features: [],
      available: true,
      running_task: null,
      identities: [],
    });
    expect(again).toEqual({ ok: true, device_id: direct.id, pool: 'direct', models: [model], refused: [] });
    for (let i = 0; i < 50 && (await presence(tenant.org.id, model))[0]?.features.length; i++) {
      await sleep(20);
    }
    expect(await presence(tenant.org.id, model)).toEqual([{ deviceId: direct.id, features: [] }]);
  });

  /** A model of the catalog (a device may announce only those). */
  const catalogModel = async () => {
    const model = uniq('medium-gw');
    await new AdminService(db()).addModel({ id: model, network: true });
    return model;
  };

  it('an invalid announce is refused in its acknowledgement and changes nothing', async () => {
    const model = await catalogModel();
    const { token } = await createDevice();
    const fake = await FakeDevice.connect(apps.dispatcher.url, token, [model]);
    devices.push(fake);
    await waitOnline([model], token);
    for (const bad of [null, {}, { models: 'x' }, { agent_version: 'a', backend: 'b', models: [''], features: [] }]) {
      expect(await fake.socket.timeout(5_000).emitWithAck('announce', bad)).toEqual({
        ok: false,
        error: 'invalid announce payload',
      });
    }
    expect((await presence('network', model)).map((p) => p.deviceId)).toEqual([await deviceIdOf(token)]);
  });

  it('a device may serve only catalog models, a direct device only its org’s, a restricted one only its list', async () => {
    const known = await catalogModel();
    const other = await catalogModel();
    const unknown = uniq('not-in-catalog');
    const tenant = await createTenant([known]);
    const announce = async (token: string, models: string[]) => {
      const fake = await FakeDevice.connect(apps.dispatcher.url, token, [], { features: [] });
      devices.push(fake);
      return fake.socket.timeout(5_000).emitWithAck('announce', {
        agent_version: 'fake-1',
        backend: 'sim',
        models,
        features: [],
        available: true,
        running_task: null,
        identities: [],
      });
    };
    const network = await createDevice();
    expect(await announce(network.token, [known, unknown, other])).toMatchObject({
      ok: true,
      models: [known, other],
      refused: [{ model: unknown, reason: 'unknown_model' }],
    });
    const direct = await createDevice(tenant.org.name);
    expect(await announce(direct.token, [known, other])).toMatchObject({
      ok: true,
      pool: 'direct',
      models: [known],
      refused: [{ model: other, reason: 'not_enabled' }],
    });
    const restricted = await createDevice();
    await db().device.update({
      where: { id: restricted.id },
      data: { modelsRestricted: true, models: { create: [{ modelId: other }] } },
    });
    expect(await announce(restricted.token, [known, other])).toMatchObject({
      ok: true,
      models: [other],
      refused: [{ model: known, reason: 'not_allowed' }],
    });
    // Nothing refused is published: no api routes a request for it to these devices.
    expect(await presence('network', unknown)).toEqual([]);
    expect(await presence(tenant.org.id, other)).toEqual([]);
  });

  it('an announce of more models than DEVICE_MAX_MODELS is refused whole', async () => {
    const { token } = await createDevice();
    const fake = await FakeDevice.connect(apps.dispatcher.url, token, [], { features: [] });
    devices.push(fake);
    const many = Array.from({ length: 65 }, (_, i) => `too-many-${i}`);
    const answer = await fake.socket.timeout(5_000).emitWithAck('announce', {
      agent_version: 'fake-1',
      backend: 'sim',
      models: many,
      features: [],
      available: true,
      running_task: null,
      identities: [],
    });
    expect(answer).toEqual({ ok: false, error: 'too many models: a device may announce at most 64' });
  });

  it('a disconnected device is withdrawn from presence, and the health count follows', async () => {
    const model = await catalogModel();
    const { token } = await createDevice();
    const before = (await http('GET', `${apps.dispatcher.url}/healthz`)).body.devices;
    const fake = await FakeDevice.connect(apps.dispatcher.url, token, [model]);
    await waitOnline([model], token);
    expect((await http('GET', `${apps.dispatcher.url}/healthz`)).body.devices).toBe(before + 1);
    fake.close();
    for (let i = 0; i < 100 && (await presence('network', model)).length > 0; i++) {
      await sleep(20);
    }
    expect(await presence('network', model)).toEqual([]);
    expect((await http('GET', `${apps.dispatcher.url}/healthz`)).body.devices).toBe(before);
  });

  it('a revoked device is disconnected and refused from then on', async () => {
    const model = await catalogModel();
    const device = await createDevice();
    const fake = await FakeDevice.connect(apps.dispatcher.url, device.token, [model]);
    devices.push(fake);
    await waitOnline([model], device.token);
    await new AdminService(db()).revokeDevice(device.id);
    for (let i = 0; i < 300 && fake.socket.connected; i++) {
      await sleep(50);
    }
    expect(fake.socket.connected).toBe(false);
    expect(await handshake({ token: device.token, protocol: PROTOCOL_VERSION })).toBe('invalid_device_token');
  });

  it('a malformed event about its own task fails that task with device_protocol_error', async () => {
    const model = await catalogModel();
    const tenant = await createTenant([model]);
    const { token } = await createDevice();
    const fake = await FakeDevice.connect(apps.dispatcher.url, token, [model]);
    devices.push(fake);
    await waitOnline([model], token);
    const pending = fetch(`${apps.api.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tenant.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }),
    });
    const a = await fake.nextAssignment();
    fake.socket.emit('task:delta', { task_address: a.task_address, seq: 0, choices: 'not a list' });
    const res = await pending;
    expect(res.status).toBe(502);
    expect(((await res.json()) as any).error.code).toBe('device_protocol_error');
    const row = await waitTerminal(a.task_address);
    expect([row.status, row.errorCode]).toEqual(['failed', 'device_protocol_error']);
    expect(fake.cancels).toContain(a.task_address);
  });

  it('events of unknown names count as invalid: DEVICE_MAX_INVALID_EVENTS of them disconnect the device', async () => {
    const { token } = await createDevice();
    const fake = await FakeDevice.connect(apps.dispatcher.url, token, []);
    devices.push(fake);
    const gone = new Promise<string>((resolve) => fake.socket.once('disconnect', resolve));
    // 20 is the default of DEVICE_MAX_INVALID_EVENTS.
    for (let i = 0; i < 20; i++) {
      fake.socket.emit(i % 2 ? 'no:such:event' : '__proto__', { i });
    }
    expect(await gone).toBe('io server disconnect');
    const metrics = (await http('GET', `${apps.dispatcher.url}/metrics`)).text;
    expect(metrics).toMatch(/switchyard_device_invalid_events_total\{[^}]*reason="unknown_event"[^}]*\} [1-9]/);
  });
});
