import { AdminService } from '@app/common';
import { FakeDevice } from '../../support/fake-device';
import {
  createDevice,
  createTenant,
  db,
  http,
  recordsWritten,
  uniq,
  waitOnline,
  waitTerminal,
} from '../../support/stack';
import type { Tenant } from '../../support/stack';
import { relayApps } from '../support/apps';

/**
 * Where a waiting request stands, as GET /v1/tasks/{address} tells its organization: its place among
 * its own organization's requests in the queue (the fair-share POSITION script), never counting
 * another organization's; and an estimate of its wait once a task of the queue has completed (the
 * service time that the transitions script's `end` keeps per queue).
 */
describe('queue standing (api)', () => {
  const settings = { QUEUE_TIMEOUT_MS: '30000', TASK_IDLE_TIMEOUT_MS: '30000' };

  const chat = (tenant: Tenant, model: string, content: string) =>
    fetch(`${apps.api.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tenant.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content }] }),
    });

  /** The organization's queued tasks, oldest first, with what GET /v1/tasks says of each. */
  async function standings(tenant: Tenant) {
    await recordsWritten();
    const rows = await db().task.findMany({ where: { orgId: tenant.org.id }, orderBy: { queuedAt: 'asc' } });
    const views = [];
    for (const row of rows) {
      const res = await http('GET', `${apps.api.url}/v1/tasks/${row.address}`, {
        headers: { authorization: `Bearer ${tenant.key}` },
      });
      expect(res.status).toBe(200);
      if (res.body.status === 'queued') {
        views.push({ position: res.body.queue_position, eta: res.body.eta_ms });
      }
    }
    return views;
  }
  const apps = relayApps(settings);
  const { devices } = apps;

  it("counts only the organization's own requests, and estimates the wait once the queue has a service time", async () => {
    const model = uniq('medium-standing');
    await new AdminService(db()).addModel({ id: model, network: true });
    const [a, b] = [await createTenant([model]), await createTenant([model])];
    const { token } = await createDevice();
    const device = await FakeDevice.connect(apps.dispatcher.url, token, [model]);
    devices.push(device);
    await waitOnline([model], token);

    // The device is busy with org A's first request; A queues two more, B three.
    const answers = [chat(a, model, 'a0')];
    const first = await device.nextAssignment();
    answers.push(chat(a, model, 'a1'), chat(a, model, 'a2'));
    answers.push(chat(b, model, 'b0'), chat(b, model, 'b1'), chat(b, model, 'b2'));
    // Until all six are queued (their records are written behind).
    const deadline = Date.now() + 15_000;
    while ((await db().task.count({ where: { orgId: { in: [a.org.id, b.org.id] } } })) < 6) {
      expect(Date.now()).toBeLessThan(deadline);
      await recordsWritten();
    }
    // No task of this queue has completed yet: no basis for an estimate.
    expect(await standings(a)).toEqual([
      { position: 1, eta: null },
      { position: 2, eta: null },
    ]);
    expect(await standings(b)).toEqual([
      { position: 1, eta: null },
      { position: 2, eta: null },
      { position: 3, eta: null },
    ]);

    // A's first completes: the queue has a service time. The device takes the next (B's, by fair share).
    device.answer(first.task_address, ['done']);
    await waitTerminal(first.task_address);
    const next = await device.nextAssignment();
    expect(next.params.messages[0].content).toBe('b0');
    const [ofA, ofB] = [await standings(a), await standings(b)];
    expect(ofA.map((s) => s.position)).toEqual([1, 2]);
    expect(ofB.map((s) => s.position)).toEqual([1, 2]);
    // One device: the wait of the n-th is n service times.
    const unit = ofA[0].eta;
    expect(Number.isInteger(unit) && unit >= 0).toBe(true);
    expect([...ofA, ...ofB].map((s) => s.eta)).toEqual([unit, 2 * unit, unit, 2 * unit]);

    device.answer(next.task_address, ['done']);
    for (let i = 0; i < 4; i++) {
      const assignment = await device.nextAssignment();
      device.answer(assignment.task_address, ['done']);
    }
    expect((await Promise.all(answers)).map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 200]);
  });
});
