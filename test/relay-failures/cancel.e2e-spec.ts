import {
  closeDb,
  createDevice,
  createTenant,
  db,
  http,
  recordsWritten,
  startApi,
  startDevice,
  startDispatcher,
  uniq,
  waitTerminal,
} from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';
import { waitStatus as waitStatusOf } from '../reliability/helpers';
import { expectStatus } from '../support/expect-status';

/** Client aborts: the job leaves the queue, or the device is told to stop; the task ends cancelled. */
describe('client disconnects', () => {
  let api: Api;
  let dispatcher: Dispatcher;
  let tenant: Tenant;
  let device: Proc;
  const model = uniq('model');
  const url = () => `${api.url}/v1/chat/completions`;

  beforeAll(async () => {
    [api, dispatcher] = await Promise.all([startApi(), startDispatcher()]);
    tenant = await createTenant([model]);
    const { token } = await createDevice();
    // Slow enough that aborts land before the first token, or mid-stream.
    device = await startDevice(dispatcher, token, { models: [model], ttftMs: 1_500, tokensPerSecond: 10, tokens: 60 });
  });

  afterAll(async () => {
    await Promise.all([device?.stop(), api?.stop(), dispatcher?.stop()]);
    await closeDb();
  });

  const post = (body: object, signal: AbortSignal) =>
    fetch(url(), {
      method: 'POST',
      headers: { authorization: `Bearer ${tenant.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'a long story' }], ...body }),
      signal,
    });

  async function latestTask() {
    await recordsWritten();
    return db().task.findFirstOrThrow({ where: { orgId: tenant.org.id }, orderBy: { queuedAt: 'desc' } });
  }

  /** The org's task in `status` now (Redis's live state: the row is written behind it). */
  const waitStatus = (status: string) => waitStatusOf(tenant.org.id, status);

  async function assertDeviceFreeAgain() {
    const res = await http('POST', url(), {
      headers: { authorization: `Bearer ${tenant.key}` },
      body: { model, max_tokens: 2, messages: [{ role: 'user', content: 'hello again' }] },
    });
    expectStatus(res, 200);
    expect(res.body.choices[0].finish_reason).toBe('length');
  }

  it('during prompt evaluation (non-streamed): the device is told to cancel and the task ends cancelled', async () => {
    const controller = new AbortController();
    const pending = post({}, controller.signal).catch((e: Error) => e);
    await waitStatus('assigned');
    controller.abort();
    // The request was aborted (fetch's DOMException comes from Node's realm, not the test's: no instanceof).
    expect(((await pending) as Error).name).toBe('AbortError');
    const task = await waitTerminal((await latestTask()).address);
    expect(task.status).toBe('cancelled');
    expect(task.errorCode).toBe('client_disconnected');
    // the task had reached a device
    expect(task.deviceId).toBeTruthy();
    await device.waitFor(new RegExp(`"task_address":"${task.address}".*"outcome":"cancelled"`));
    await assertDeviceFreeAgain();
  });

  it('mid-stream: the device stops, the task ends cancelled with what was sent hashed', async () => {
    const controller = new AbortController();
    const res = await post({ stream: true }, controller.signal);
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    let text = '';
    while (!text.includes('"content":" ') && !/"content":"[A-Za-z]/.test(text)) {
      const { value } = await reader.read();
      text += new TextDecoder().decode(value);
    }
    controller.abort();
    const task = await waitTerminal((await latestTask()).address);
    expect(task.status).toBe('cancelled');
    // output had reached the client
    expect(task.firstTokenAt).toBeTruthy();
    expect(task.outputSha256 ?? '').toMatch(/^[0-9a-f]{64}$/);
    await device.waitFor(new RegExp(`"task_address":"${task.address}".*"outcome":"cancelled"`));
    await assertDeviceFreeAgain();
  });

  it('while queued: the job is removed and never reaches a device', async () => {
    // Occupy the only device, then queue a second request and abandon it.
    const busy = new AbortController();
    const first = post({}, busy.signal).catch((e: Error) => e);
    const busyTask = await waitStatus('assigned');
    const controller = new AbortController();
    const second = post({ messages: [{ role: 'user', content: 'queued one' }] }, controller.signal).catch(
      (e: Error) => e,
    );
    const queued = await waitStatus('queued');
    controller.abort();
    await second;
    const task = await waitTerminal(queued.address);
    expect(task.status).toBe('cancelled');
    // no device ever had it
    expect(task.deviceId).toBeNull();
    expect(task.attempts).toBe(0);
    busy.abort();
    await first;
    expect((await waitTerminal(busyTask.address)).status).toBe('cancelled');
    await assertDeviceFreeAgain();
    expect(device.output).not.toMatch(new RegExp(queued.address));
  });
});
