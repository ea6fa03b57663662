import { createRedis, KeySpace } from '@app/common';
import {
  REDIS_URL,
  closeDb,
  createDevice,
  createTenant,
  sleep,
  startApi,
  startDispatcher,
  uniq,
  waitOnline,
} from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';
import { chat, eventually, startRuntimeDevice, waitOffline } from './support/device';
import { FakeOllama, FakeOpenAI } from './support/fake-runtimes';
import { expectStatus } from '../support/expect-status';

/** Without --model the agent serves what the runtime lists, and follows the list as it changes. */
describe('model discovery', () => {
  let api: Api;
  let dispatcher: Dispatcher;
  const devices: Proc[] = [];
  // Discovered models keep the runtime's names, so the runtime's names are the catalog's here.
  const names = {
    ollama: [uniq('alpha') + ':1b', uniq('beta') + ':3b'],
    openai: [uniq('org/alpha'), uniq('org/beta')],
    explicit: [uniq('pinned'), uniq('gamma')],
  };
  const ollama = new FakeOllama([names.ollama[0]]);
  const server = new FakeOpenAI([names.openai[0]]);
  const pinnedRuntime = new FakeOllama(['pinned-upstream:1b']);
  let tenant: Tenant;

  beforeAll(async () => {
    await Promise.all([ollama.start(), server.start(), pinnedRuntime.start()]);
    [api, dispatcher] = await Promise.all([startApi(), startDispatcher()]);
    tenant = await createTenant([...names.ollama, ...names.openai, ...names.explicit]);
    ollama.handlers.set('*', FakeOllama.reply({ content: ['Hello', '.'] }));
    server.handlers.set('*', FakeOpenAI.reply({ choices: [['Hello', '.']] }));
    pinnedRuntime.handlers.set('*', FakeOllama.reply({ content: ['Pinned', '.'] }));
  });

  afterAll(async () => {
    await Promise.all([
      ...devices.map((d) => d.stop()),
      api?.stop(),
      dispatcher?.stop(),
      ollama.stop(),
      server.stop(),
      pinnedRuntime.stop(),
    ]);
    await closeDb();
  });

  for (const backend of ['ollama', 'openai'] as const) {
    it(`${backend}: announces the listed models, then a model added or removed upstream`, async () => {
      const runtime = backend === 'ollama' ? ollama : server;
      const [first, second] = names[backend];
      const { token } = await createDevice();
      const device = await startRuntimeDevice(dispatcher, token, {
        backend,
        upstream: runtime instanceof FakeOpenAI ? runtime.baseUrl : runtime.url,
        online: [first],
      });
      devices.push(device);
      const ok = await chat(api, tenant, { model: first });
      expectStatus(ok, 200);
      expect(runtime.lastChat().body.model).toBe(first);

      const missing = await chat(api, tenant, { model: second });
      expect(missing.status).toBe(503);
      expect(missing.body.error.code).toBe('no_device_available');

      // Pulled while the agent runs: served within the discovery interval.
      runtime.models = [first, second];
      const added = await eventually(
        () => chat(api, tenant, { model: second }),
        (r) => r.status !== 503,
        `${second} to be announced`,
      );
      expectStatus(added, 200);
      expect(runtime.lastChat().body.model).toBe(second);

      // Removed: withdrawn, and the api says no device serves it.
      runtime.models = [second];
      await waitOffline(token, first);
      const removed = await chat(api, tenant, { model: first });
      expect(removed.status).toBe(503);
      expect(removed.body.error.code).toBe('no_device_available');
      expect((await chat(api, tenant, { model: second })).status).toBe(200);
      await device.waitFor(/upstream models changed/);
    });
  }

  it('with --model, the list stays as given whatever the runtime lists', async () => {
    const [pinned, gamma] = names.explicit;
    const { id, token } = await createDevice();
    const device = await startRuntimeDevice(dispatcher, token, {
      backend: 'ollama',
      upstream: pinnedRuntime.url,
      models: [`${pinned}=pinned-upstream:1b`],
    });
    devices.push(device);
    const res = await chat(api, tenant, { model: pinned });
    expectStatus(res, 200);
    expect(pinnedRuntime.lastChat().body.model).toBe('pinned-upstream:1b');

    pinnedRuntime.models = [gamma];
    // Two more reads of the list after the change: the agent has seen it.
    const tagsSeen = () => pinnedRuntime.requests.filter((r) => r.path === '/api/tags').length;
    const before = tagsSeen();
    while (tagsSeen() < before + 2) {
      await sleep(50);
    }
    await waitOnline([pinned], token, { proc: device });
    const redis = createRedis(REDIS_URL);
    try {
      const gammaPresence = await redis.zrangebyscore(
        KeySpace.of(redis).presence('network', gamma),
        Date.now(),
        '+inf',
      );
      // a listed model is not added to --model
      expect(gammaPresence.some((m) => m.startsWith(`${id}|`))).toBe(false);
    } finally {
      redis.disconnect();
    }
    await device.waitFor(/"upstream_model":"pinned-upstream:1b".*does not list this model/);
  });
});
