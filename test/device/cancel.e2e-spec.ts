import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
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

/** The bound: the runtime stops generating within this of the client going away. */
const ABORT_BOUND_MS = 500;

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

  before(async () => {
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

  after(async () => {
    await Promise.all([...devices.map((d) => d.stop()), api?.stop(), dispatcher?.stop(), ollama.stop(), server.stop()]);
    await closeDb();
  });

  /** Waits until the fake saw the connection of `rec` close, and returns how long after `since` that was. */
  async function closedWithin(rec: Recorded, since: number): Promise<number> {
    for (let i = 0; i < 400 && rec.closedAt === null; i++) {
      await sleep(5);
    }
    assert.ok(rec.closedAt !== null, 'the runtime never saw its request closed');
    assert.equal(rec.completed, false, 'the runtime had not finished its answer');
    return rec.closedAt - since;
  }

  async function assertCancelledAndFree(backend: 'ollama' | 'openai') {
    const address = (await taskRow(tenant)).address;
    let task = await waitTerminal(address);
    // The status and the error code may be written one after the other.
    for (let i = 0; i < 200 && task.errorCode === null; i++) {
      await sleep(10);
      task = await taskRow(tenant, address);
    }
    assert.equal(task.status, 'cancelled');
    assert.equal(task.errorCode, 'client_disconnected');
    const device = devices[backend === 'ollama' ? 0 : 1];
    await device.waitFor(new RegExp(`"task_address":"${task.address}".*"outcome":"cancelled"`));
    // The device takes the next task at once.
    if (backend === 'ollama') {
      ollama.handlers.set('slow:8b', FakeOllama.reply({ content: ['ok'] }));
    } else {
      server.handlers.set('slow', FakeOpenAI.reply({ choices: [['ok']] }));
    }
    const next = await chat(api, tenant, { model: models[backend] });
    assert.equal(next.status, 200, next.text);
  }

  for (const backend of ['ollama', 'openai'] as const) {
    it(`${backend}: during prompt evaluation, the runtime's request closes within ${ABORT_BOUND_MS} ms`, async (t) => {
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
      const abortedAt = Date.now();
      controller.abort();
      assert.ok((await pending) instanceof Error);
      const ms = await closedWithin(rec, abortedAt);
      assert.ok(ms < ABORT_BOUND_MS, `closed ${ms} ms after the client's cancel`);
      t.diagnostic(`the runtime's connection closed ${ms} ms after the client's cancel`);
      await assertCancelledAndFree(backend);
    });

    it(`${backend}: mid-stream, the runtime's request closes within ${ABORT_BOUND_MS} ms`, async (t) => {
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
      assert.equal(res.status, 200);
      const reader = res.body!.getReader();
      let text = '';
      while (!text.includes(' w3')) {
        const { value } = await reader.read();
        text += new TextDecoder().decode(value);
      }
      const rec = runtime.chats()[seen];
      const abortedAt = Date.now();
      controller.abort();
      const ms = await closedWithin(rec, abortedAt);
      assert.ok(ms < ABORT_BOUND_MS, `closed ${ms} ms after the client's cancel`);
      t.diagnostic(`the runtime's connection closed ${ms} ms after the client's cancel`);
      await assertCancelledAndFree(backend);
    });
  }
});
