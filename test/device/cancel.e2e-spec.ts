import {
  closeDb,
  createDevice,
  createTenant,
  sleep,
  startApi,
  startDispatcher,
  uniq,
  waitTerminal,
} from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';
import { chat, completionsUrl, startRuntimeDevice, taskRow } from './support/device';
import type { Recorded } from './support/fake-runtimes';
import { FakeOllama, FakeOpenAI } from './support/fake-runtimes';
import { expectStatus } from '../support/expect-status';

/** A client cancel aborts the runtime's HTTP request: during prompt evaluation and mid-stream. */
describe('cancel reaches the runtime', () => {
  let api: Api;
  let dispatcher: Dispatcher;
  const devices: Proc[] = [];
  let tenant: Tenant;
  const ollama = new FakeOllama(['slow:8b']);
  const server = new FakeOpenAI(['slow']);
  const models = { ollama: uniq('cancel-ollama'), openai: uniq('cancel-openai') };
  const runtimes = { ollama, openai: server };

  beforeAll(async () => {
    await Promise.all([ollama.start(), server.start()]);
    [api, dispatcher] = await Promise.all([startApi(), startDispatcher()]);
    tenant = await createTenant(Object.values(models));
    const a = await createDevice();
    const b = await createDevice();
    devices.push(
      await startRuntimeDevice(dispatcher, a.token, {
        backend: 'ollama',
        upstream: ollama.url,
        models: [`${models.ollama}=slow:8b`],
      }),
      await startRuntimeDevice(dispatcher, b.token, {
        backend: 'openai',
        upstream: server.baseUrl,
        models: [`${models.openai}=slow`],
      }),
    );
  });

  afterAll(async () => {
    await Promise.all([...devices.map((d) => d.stop()), api?.stop(), dispatcher?.stop(), ollama.stop(), server.stop()]);
    await closeDb();
  });

  /**
   * Waits until the fake saw the connection of `rec` close before its answer was complete: the
   * cancel reached the runtime (its answer would take 30 s or more). How fast it does is measured by
   * `npm run bench`, not here.
   */
  async function waitAborted(rec: Recorded): Promise<void> {
    const deadline = Date.now() + 15_000;
    while (rec.closedAt === null && Date.now() < deadline) {
      await sleep(20);
    }
    // the runtime never saw its request closed
    expect(rec.closedAt).not.toBeNull();
    // the runtime had finished its answer: the cancel did not reach it
    expect(rec.completed).toBe(false);
  }

  async function assertCancelledAndFree(backend: 'ollama' | 'openai') {
    const address = (await taskRow(tenant)).address;
    let task = await waitTerminal(address);
    // The status and the error code may be written one after the other.
    for (let i = 0; i < 200 && task.errorCode === null; i++) {
      await sleep(10);
      task = await taskRow(tenant, address);
    }
    expect(task.status).toBe('cancelled');
    expect(task.errorCode).toBe('client_disconnected');
    const device = devices[backend === 'ollama' ? 0 : 1];
    await device.waitFor(new RegExp(`"task_address":"${task.address}".*"outcome":"cancelled"`));
    // The device takes the next task at once.
    if (backend === 'ollama') {
      ollama.handlers.set('slow:8b', FakeOllama.reply({ content: ['ok'] }));
    } else {
      server.handlers.set('slow', FakeOpenAI.reply({ choices: [['ok']] }));
    }
    const next = await chat(api, tenant, { model: models[backend] });
    expectStatus(next, 200);
  }

  for (const backend of ['ollama', 'openai'] as const) {
    it(`${backend}: during prompt evaluation, the runtime's request is closed`, async () => {
      const runtime = runtimes[backend];
      runtime.handlers.set(
        backend === 'ollama' ? 'slow:8b' : 'slow',
        backend === 'ollama'
          ? FakeOllama.reply({ content: ['late'], firstLineDelayMs: 30_000 })
          : FakeOpenAI.reply({ choices: [['late']], firstChunkDelayMs: 30_000 }),
      );
      const seen = runtime.chats().length;
      const controller = new AbortController();
      const pending = fetch(completionsUrl(api), {
        method: 'POST',
        headers: { authorization: `Bearer ${tenant.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: models[backend], messages: [{ role: 'user', content: 'a long prompt' }] }),
        signal: controller.signal,
      }).catch((e: Error) => e);
      const rec = await runtime.waitChats(seen + 1);
      controller.abort();
      // The request was aborted (fetch's DOMException comes from Node's realm, not the test's: no instanceof).
      expect(((await pending) as Error).name).toBe('AbortError');
      await waitAborted(rec);
      await assertCancelledAndFree(backend);
    });

    it(`${backend}: mid-stream, the runtime's request is closed`, async () => {
      const runtime = runtimes[backend];
      const words = Array.from({ length: 2_000 }, (_, i) => ` w${i}`);
      runtime.handlers.set(
        backend === 'ollama' ? 'slow:8b' : 'slow',
        backend === 'ollama'
          ? FakeOllama.reply({ content: words, intervalMs: 20 })
          : FakeOpenAI.reply({ choices: [words], intervalMs: 20 }),
      );
      const seen = runtime.chats().length;
      const controller = new AbortController();
      const res = await fetch(completionsUrl(api), {
        method: 'POST',
        headers: { authorization: `Bearer ${tenant.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: models[backend], stream: true, messages: [{ role: 'user', content: 'talk' }] }),
        signal: controller.signal,
      });
      expect(res.status).toBe(200);
      const reader = res.body!.getReader();
      let text = '';
      while (!text.includes(' w3')) {
        const { value } = await reader.read();
        text += new TextDecoder().decode(value);
      }
      const rec = runtime.chats()[seen];
      controller.abort();
      await waitAborted(rec);
      await assertCancelledAndFree(backend);
    });
  }
});
