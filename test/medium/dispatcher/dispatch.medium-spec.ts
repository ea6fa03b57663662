import { AdminService } from '@app/common';
import { FakeDevice } from '../../support/fake-device';
import { createDevice, createTenant, db, taskCount, uniq, waitOnline, waitTerminal } from '../../support/stack';
import type { Tenant } from '../../support/stack';
import { relayApps } from '../support/apps';

/**
 * The dispatcher's assignment rules, seen from the devices: one task per device at a time, only to
 * a device that can serve it, another device when one does not acknowledge, and the order and
 * ownership of the events a device sends.
 */
describe('dispatch (dispatcher)', () => {
  const settings = { ASSIGN_ACK_TIMEOUT_MS: '800', QUEUE_TIMEOUT_MS: '20000', TASK_IDLE_TIMEOUT_MS: '20000' };

  async function model(): Promise<{ model: string; tenant: Tenant }> {
    const id = uniq('medium-dispatch');
    await new AdminService(db()).addModel({ id, network: true });
    return { model: id, tenant: await createTenant([id]) };
  }
  const apps = relayApps(settings);
  const { devices } = apps;

  async function device(models: string[], opts: { features?: string[]; ack?: boolean } = {}): Promise<FakeDevice> {
    const { token } = await createDevice();
    const fake = await FakeDevice.connect(apps.dispatcher.url, token, models, opts);
    devices.push(fake);
    await waitOnline(models, token);
    return fake;
  }

  /** Until the organization has `n` tasks (their records are written behind). */
  async function queued(tenant: Tenant, n: number): Promise<void> {
    const deadline = Date.now() + 15_000;
    while ((await taskCount(tenant.org.id)) < n) {
      expect(Date.now()).toBeLessThan(deadline);
    }
  }

  const chat = (tenant: Tenant, model: string, extra: object = {}) =>
    fetch(`${apps.api.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tenant.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], ...extra }),
    });

  it('a device holds one task at a time: the next waits until the first is done', async () => {
    const { model: m, tenant } = await model();
    const fake = await device([m]);
    const first = chat(tenant, m);
    const a = await fake.nextAssignment();
    const second = chat(tenant, m);
    await queued(tenant, 2);
    // A job announced after the second's, of another model, is handed to its device and answered: the
    // dispatcher has handled the second's announcement by then, and did not give it to the busy device.
    const other = await model();
    const probe = await device([other.model]);
    const answered = chat(other.tenant, other.model);
    probe.answer((await probe.nextAssignment()).task_address, ['probe']);
    expect((await answered).status).toBe(200);
    expect(fake.assignments).toEqual([]);
    fake.answer(a.task_address, ['one']);
    const b = await fake.nextAssignment();
    expect(b.task_address).not.toBe(a.task_address);
    fake.answer(b.task_address, ['two']);
    expect((await first).status).toBe(200);
    expect((await second).status).toBe(200);
  });

  it('a device that does not acknowledge: the task goes to another device, as attempt 2', async () => {
    const { model: m, tenant } = await model();
    const silent = await device([m], { ack: false });
    const pending = chat(tenant, m);
    const first = await silent.nextAssignment();
    const healthy = await device([m]);
    const retry = await healthy.nextAssignment();
    expect([retry.task_address, retry.attempt]).toEqual([first.task_address, 2]);
    healthy.answer(retry.task_address, ['ok']);
    expect((await pending).status).toBe(200);
    expect((await waitTerminal(first.task_address)).attempts).toBe(2);
  });

  it('a task that needs a feature goes only to a device that declares it', async () => {
    const { model: m, tenant } = await model();
    const plain = await device([m], { features: [] });
    const capable = await device([m], { features: ['tools'] });
    const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }];
    const pending = chat(tenant, m, { tools });
    const assignment = await capable.nextAssignment();
    expect(assignment.params.tools).toEqual(tools);
    capable.answer(assignment.task_address, ['called']);
    expect((await pending).status).toBe(200);
    expect(plain.assignments).toEqual([]);
  });

  it('events out of order, or for a task the device does not hold, are not relayed', async () => {
    const { model: m, tenant } = await model();
    const fake = await device([m]);
    const other = await device([m]);
    const pending = chat(tenant, m);
    const [holder, a] = await FakeDevice.firstAssigned([fake, other]);
    const stranger = holder === fake ? other : fake;
    // A skipped sequence number and another device's claim on the task are both dropped.
    holder.delta(a.task_address, 3, 'too early');
    stranger.delta(a.task_address, 0, 'not mine');
    // Both handled (and dropped) before what follows.
    await Promise.all([holder, stranger].map((d) => d.sync()));
    holder.delta(a.task_address, 0, 'in ');
    holder.delta(a.task_address, 1, 'order');
    holder.done(a.task_address, 2, { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 });
    const res = await pending;
    expect(res.status).toBe(200);
    expect(((await res.json()) as any).choices[0].message.content).toBe('in order');
  });

  it('a device that becomes available again is handed the task that waited for it', async () => {
    const { model: m, tenant } = await model();
    const fake = await device([m]);
    await fake.socket.timeout(5_000).emitWithAck('announce', {
      agent_version: 'fake-1',
      backend: 'sim',
      models: [m],
      features: [],
      available: false,
      running_task: null,
      identities: [],
    });
    // Not available: the request is refused at once, as with no device at all.
    const refused = await chat(tenant, m);
    expect(refused.status).toBe(503);
    const online = fake.socket.timeout(5_000).emitWithAck('announce', {
      agent_version: 'fake-1',
      backend: 'sim',
      models: [m],
      features: [],
      available: true,
      running_task: null,
      identities: [],
    });
    await online;
    const pending = chat(tenant, m);
    const a = await fake.nextAssignment();
    fake.answer(a.task_address, ['back']);
    expect((await pending).status).toBe(200);
  });
});
