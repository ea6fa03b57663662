import { AdminService } from '@app/common';
import { FakeDevice } from '../../support/fake-device';
import {
  createDevice,
  createTenant,
  db,
  recordsWritten,
  sleep,
  uniq,
  waitOnline,
  waitTerminal,
} from '../../support/stack';
import type { Tenant } from '../../support/stack';
import { relayApps } from '../support/apps';

/**
 * The task record's transitions: every one is conditional on the state it expects, so that the
 * first ending wins and a late event of a device never overwrites it; times are in order.
 */
describe('task records', () => {
  const settings = { TASK_IDLE_TIMEOUT_MS: '1500', QUEUE_TIMEOUT_MS: '5000' };

  async function fixture() {
    const model = uniq('medium-records');
    await new AdminService(db()).addModel({ id: model, network: true });
    const tenant = await createTenant([model]);
    const { id, token } = await createDevice();
    const fake = await FakeDevice.connect(apps.dispatcher.url, token, [model]);
    devices.push(fake);
    await waitOnline([model], token);
    return { model, tenant, fake, deviceId: id };
  }
  const apps = relayApps(settings);
  const { devices } = apps;

  const chat = (tenant: Tenant, model: string, stream = false, signal?: AbortSignal) =>
    fetch(`${apps.api.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tenant.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, stream, messages: [{ role: 'user', content: 'hi' }] }),
      signal,
    });

  it('a completed task: who served it, counts, and queued ≤ assigned ≤ first token ≤ finished', async () => {
    const { model, tenant, fake, deviceId } = await fixture();
    const pending = chat(tenant, model, true);
    const a = await fake.nextAssignment();
    fake.delta(a.task_address, 0, 'one');
    await sleep(100);
    fake.delta(a.task_address, 1, ' two');
    fake.done(a.task_address, 2, { prompt_tokens: 4, completion_tokens: 2, total_tokens: 6 }, 'length');
    await (await pending).text();
    const row = await waitTerminal(a.task_address);
    expect(row).toMatchObject({
      status: 'completed',
      deviceId,
      finishReason: 'length',
      promptTokens: 4,
      completionTokens: 2,
      stream: true,
      errorCode: null,
    });
    const times = [row.queuedAt, row.assignedAt, row.firstTokenAt, row.finishedAt].map((d) => d!.getTime());
    expect([...times].sort((x, y) => x - y)).toEqual(times);
    expect(row.finishedAt!.getTime() - row.firstTokenAt!.getTime()).toBeGreaterThanOrEqual(50);
  });

  it('a task the api ended (idle timeout) stays ended: a late completion from the device changes nothing', async () => {
    const { model, tenant, fake } = await fixture();
    const pending = chat(tenant, model);
    const a = await fake.nextAssignment();
    expect((await pending).status).toBe(504);
    const ended = await waitTerminal(a.task_address);
    fake.answer(a.task_address, ['too', 'late']);
    // Handled (and dropped) by the dispatcher before this returns; any transition they caused is recorded.
    await fake.sync();
    await recordsWritten();
    const row = await db().task.findUniqueOrThrow({ where: { address: a.task_address } });
    expect(row).toEqual(ended);
    expect([row.status, row.errorCode, row.completionTokens]).toEqual(['timed_out', 'device_timeout', null]);
  });

  it('a task the client cancelled stays cancelled: a late error from the device changes nothing', async () => {
    const { model, tenant, fake } = await fixture();
    const controller = new AbortController();
    const pending = chat(tenant, model, false, controller.signal).catch((e: Error) => e);
    const a = await fake.nextAssignment();
    controller.abort();
    await pending;
    const ended = await waitTerminal(a.task_address);
    expect([ended.status, ended.errorCode]).toEqual(['cancelled', 'client_disconnected']);
    fake.error(a.task_address, 0, 'device_error', 'the runtime stopped');
    await fake.sync();
    await recordsWritten();
    expect(await db().task.findUniqueOrThrow({ where: { address: a.task_address } })).toEqual(ended);
  });
});
