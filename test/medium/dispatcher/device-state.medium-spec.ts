import { AdminService } from '@app/common';
import { FakeDevice } from '../../support/fake-device';
import { ADMIN_TOKEN, createDevice, createTenant, db, http, sleep, uniq, waitOnline } from '../../support/stack';
import { relayApps } from '../support/apps';

/**
 * The live state operators see of a device (GET /admin/devices/{id}), kept in Redis by scripts: its
 * dispatcher renews the heartbeat of its connected devices in batches (one script per slice of them),
 * and the task transitions set and clear the task the device holds.
 */
describe('device live state (dispatcher)', () => {
  const apps = relayApps();
  const { devices } = apps;

  const live = async (id: string) => {
    const res = await http('GET', `${apps.api.url}/admin/devices/${id}`, {
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    expect(res.status).toBe(200);
    return res.body;
  };

  /** Polls the device's live state until `ok` holds; returns it (or the last one seen, which then fails the test). */
  async function until(id: string, ok: (state: any) => boolean, timeoutMs = 15_000) {
    const deadline = Date.now() + timeoutMs;
    let state = await live(id);
    while (!ok(state) && Date.now() < deadline) {
      await sleep(50);
      state = await live(id);
    }
    return state;
  }

  it('a connected device: its heartbeat is renewed while it stays, the task it holds is shown while it holds it', async () => {
    const model = uniq('medium-live');
    await new AdminService(db()).addModel({ id: model, network: true });
    const tenant = await createTenant([model]);
    const { id, token } = await createDevice();
    const fake = await FakeDevice.connect(apps.dispatcher.url, token, [model]);
    devices.push(fake);
    await waitOnline([model], token);

    const connected = await until(id, (s) => s.models.length > 0);
    expect(connected).toMatchObject({ online: true, models: [model], available: true, task: null });
    // Renewed by the dispatcher's batch script (every 5 s): the heartbeat moves past the connection.
    const renewed = await until(id, (s) => Date.parse(s.last_heartbeat_at) > Date.parse(connected.connected_at));
    expect(Date.parse(renewed.last_heartbeat_at)).toBeGreaterThan(Date.parse(connected.connected_at));
    expect(renewed).toMatchObject({ online: true, connected_at: connected.connected_at, models: [model] });

    const pending = fetch(`${apps.api.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tenant.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }),
    });
    const assignment = await fake.nextAssignment();
    // Set by the claim.
    expect((await until(id, (s) => s.task !== null)).task).toBe(assignment.task_address);
    fake.answer(assignment.task_address, ['ok']);
    expect((await pending).status).toBe(200);
    // Cleared by the ending.
    expect(await until(id, (s) => s.task === null)).toMatchObject({ online: true, task: null });

    fake.close();
    expect(await until(id, (s) => !s.online)).toMatchObject({ online: false, task: null, last_heartbeat_at: null });
  });
});
