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
import { postSse } from '../support/sse';
import { chat, completionsUrl, startRuntimeDevice, taskRow, waitStatus } from './support/device';
import type { Recorded } from './support/fake-runtimes';
import { FakeOllama } from './support/fake-runtimes';
import { expectStatus } from '../support/expect-status';

/** Until the runtime saw its request's connection close. */
async function waitClosed(rec: Recorded): Promise<void> {
  for (let i = 0; i < 1_000 && rec.closedAt === null; i++) {
    await sleep(10);
  }
  // the runtime's request was never closed
  expect(rec.closedAt).not.toBeNull();
}

/** A dispatcher that dies mid-task, and the agent's own shutdown. */
describe('agent lifecycle with a runtime', () => {
  let api: Api;
  let dispatcher: Dispatcher;
  let tenant: Tenant;
  const procs: Proc[] = [];
  const ollama = new FakeOllama(['llama3.2:3b']);
  const model = uniq('lifecycle');
  const words = (n: number) => Array.from({ length: n }, (_, i) => (i === 0 ? 'w0' : ` w${i}`));

  beforeAll(async () => {
    await ollama.start();
    // The api ends a task whose dispatcher vanished after this much silence.
    [api, dispatcher] = await Promise.all([startApi({ TASK_IDLE_TIMEOUT_MS: '3000' }), startDispatcher()]);
    tenant = await createTenant([model]);
  });

  afterAll(async () => {
    await Promise.all([...procs.map((p) => p.stop('SIGKILL')), api?.stop(), dispatcher?.stop(), ollama.stop()]);
    await closeDb();
  });

  async function device(): Promise<Proc> {
    const { token } = await createDevice();
    const proc = await startRuntimeDevice(dispatcher, token, {
      backend: 'ollama',
      upstream: ollama.url,
      models: [`${model}=llama3.2:3b`],
    });
    procs.push(proc);
    return proc;
  }

  it('dispatcher killed mid-task: the runtime request is aborted, the client gets an error, the agent serves the new dispatcher', async () => {
    const agent = await device();
    ollama.handlers.set('llama3.2:3b', FakeOllama.reply({ content: words(2_000), intervalMs: 20 }));
    const seen = ollama.chats().length;
    const pending = postSse(completionsUrl(api), tenant.key, {
      model,
      stream: true,
      messages: [{ role: 'user', content: 'a long story' }],
    });
    await waitStatus(tenant, 'streaming');
    const rec = await ollama.waitChats(seen + 1);
    const announces = () => agent.output.split('announced to dispatcher').length - 1;
    const announcedBefore = announces();

    dispatcher.proc.child.kill('SIGKILL');
    await dispatcher.proc.exited;
    // Back on the same port while the rest is checked, as a supervisor would restart it.
    const restarted = startDispatcher({}, dispatcher.port);
    // The agent drops the task with its connection, and stops the runtime.
    await waitClosed(rec);
    expect(rec.completed).toBe(false);

    const res = await pending;
    expect(res.status).toBe(200);
    const last = res.events.at(-1);
    expect({ type: typeof last.error?.code, message: `the stream ended with ${JSON.stringify(last)}` }).toEqual(
      expect.objectContaining({ type: 'string' }),
    );
    expect(res.events).not.toContain('[DONE]');
    const row = await waitTerminal(res.events[0].task_address);
    expect({ ok: ['failed', 'timed_out'].includes(row.status), status: row.status }).toEqual(
      expect.objectContaining({ ok: true }),
    );

    dispatcher = await restarted;
    await agent.waitFor(/disconnected from dispatcher/);
    for (let i = 0; i < 600 && announces() === announcedBefore; i++) {
      await sleep(50);
    }
    // the agent announced itself to the new dispatcher
    expect(announces()).toBeGreaterThan(announcedBefore);
    ollama.handlers.set('llama3.2:3b', FakeOllama.reply({ content: ['Back', '.'] }));
    const next = await chat(api, tenant, { model });
    expectStatus(next, 200);
    expect(next.body.choices[0].message.content).toBe('Back.');
    await agent.stop();
  });

  it('SIGTERM mid-task: the task completes, the agent exits 0', async () => {
    const agent = await device();
    ollama.handlers.set('llama3.2:3b', FakeOllama.reply({ content: words(40), intervalMs: 25 }));
    const seen = ollama.chats().length;
    const pending = chat(api, tenant, { model });
    // Mid-task once the runtime has the request (the answer takes a second; a client that does not stream
    // has it held whole, so the task is not `streaming` meanwhile).
    const rec = await ollama.waitChats(seen + 1);
    agent.child.kill('SIGTERM');
    await agent.waitFor(/shutting down after the current task/);
    const res = await pending;
    expectStatus(res, 200);
    expect(res.body.choices[0].message.content).toBe(words(40).join(''));
    expect(res.body.choices[0].finish_reason).toBe('stop');
    expect(await agent.exited).toBe(0);
    // the runtime finished its answer
    expect(rec.completed).toBe(true);
    expect((await taskRow(tenant, res.body.task_address)).status).toBe('completed');
  });

  it('a second signal cancels the task: the runtime request is aborted, device_shutdown, exit 0', async () => {
    const agent = await device();
    ollama.handlers.set('llama3.2:3b', FakeOllama.reply({ content: words(2_000), intervalMs: 20 }));
    const seen = ollama.chats().length;
    const pending = chat(api, tenant, { model });
    await waitStatus(tenant, 'streaming');
    const rec = await ollama.waitChats(seen + 1);
    agent.child.kill('SIGTERM');
    await agent.waitFor(/shutting down after the current task/);
    agent.child.kill('SIGTERM');
    const res = await pending;
    expectStatus(res, 502);
    expect(res.body.error.code).toBe('device_shutdown');
    expect(await agent.exited).toBe(0);
    await waitClosed(rec);
    expect(rec.completed).toBe(false);
  });
});
