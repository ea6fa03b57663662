import { closeDb, createDevice, createTenant, startApi, startDispatcher, uniq, waitOnline } from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';
import { chat, startRuntimeDevice, taskRow, waitOffline } from './support/device';
import { FakeOllama, FakeOpenAI } from './support/fake-runtimes';
import { expectStatus } from '../support/expect-status';

/** A runtime that goes away makes the device unavailable (no tasks, 503 at the api) until it answers again. */
describe('upstream down and back', () => {
  let api: Api;
  let dispatcher: Dispatcher;
  const devices: Proc[] = [];
  let tenant: Tenant;
  const ollama = new FakeOllama(['llama3.2:3b']);
  const server = new FakeOpenAI(['qwen2.5-7b-instruct']);
  const models = { ollama: uniq('avail-ollama'), openai: uniq('avail-openai') };

  beforeAll(async () => {
    await Promise.all([ollama.start(), server.start()]);
    ollama.handlers.set('*', FakeOllama.reply({ content: ['Up', '.'] }));
    server.handlers.set('*', FakeOpenAI.reply({ choices: [['Up', '.']] }));
    [api, dispatcher] = await Promise.all([startApi(), startDispatcher()]);
    tenant = await createTenant(Object.values(models));
  });

  afterAll(async () => {
    await Promise.all([...devices.map((d) => d.stop()), api?.stop(), dispatcher?.stop(), ollama.stop(), server.stop()]);
    await closeDb();
  });

  it('noticed by a probe: unavailable while Ollama is down (503), available again once it answers', async () => {
    const { token } = await createDevice();
    const device = await startRuntimeDevice(dispatcher, token, {
      backend: 'ollama',
      upstream: ollama.url,
      models: [`${models.ollama}=llama3.2:3b`],
    });
    devices.push(device);
    expect((await chat(api, tenant, { model: models.ollama })).status).toBe(200);

    await ollama.stop();
    await waitOffline(token, models.ollama);
    const down = await chat(api, tenant, { model: models.ollama });
    expect(down.status).toBe(503);
    expect(down.body.error.code).toBe('no_device_available');
    await device.waitFor(/upstream unreachable/);

    // Back on the same port: the health probe finds it and the device announces itself available.
    await ollama.start(ollama.port);
    await waitOnline([models.ollama], token, { proc: device });
    const up = await chat(api, tenant, { model: models.ollama });
    expectStatus(up, 200);
    expect(up.body.choices[0].message.content).toBe('Up.');
    await device.waitFor(/upstream reachable/);
    expect(device.child.exitCode).toBeNull();
  });

  it('noticed by a task: the task ends upstream_unreachable, then the device is unavailable until the server is back', async () => {
    const { token } = await createDevice();
    const device = await startRuntimeDevice(dispatcher, token, {
      backend: 'openai',
      upstream: server.baseUrl,
      models: [`${models.openai}=qwen2.5-7b-instruct`],
      // No probe before the task finds out.
      discoveryIntervalMs: 600_000,
    });
    devices.push(device);
    expect((await chat(api, tenant, { model: models.openai })).status).toBe(200);

    await server.stop();
    const failed = await chat(api, tenant, { model: models.openai });
    expectStatus(failed, 502);
    expect(failed.body.error.code).toBe('upstream_unreachable');
    expect(failed.body.error.message).toMatch(
      /^The device could not complete the request\. It reported: cannot reach the upstream at \[url\]/,
    );
    expect((await taskRow(tenant)).errorCode).toBe('upstream_unreachable');

    await waitOffline(token, models.openai);
    const down = await chat(api, tenant, { model: models.openai });
    expect(down.status).toBe(503);
    expect(down.body.error.code).toBe('no_device_available');

    await server.start(server.port);
    await waitOnline([models.openai], token, { proc: device });
    const up = await chat(api, tenant, { model: models.openai });
    expectStatus(up, 200);
    expect(device.child.exitCode).toBeNull();
  });
});
