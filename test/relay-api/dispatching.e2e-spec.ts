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
} from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';

/**
 * How jobs reach idle devices: each announced job is offered to one idle device, a device that
 * finds one passes the queue on while more were announced, and a device that finishes looks in its
 * queues with jobs left. A job that nobody fetched would wait for QUEUE_TIMEOUT_MS (short here) and
 * fail with 503 queue_timeout, so every burst below must come back 200.
 */
describe('dispatching: bursts across models and devices', () => {
  let api: Api;
  let dispatcher: Dispatcher;
  let tenant: Tenant;
  const devices: Proc[] = [];
  const models = [uniq('multi'), uniq('multi'), uniq('multi')];
  const shared = uniq('spread');
  const spreadIds: string[] = [];

  beforeAll(async () => {
    [api, dispatcher] = await Promise.all([startApi({ QUEUE_TIMEOUT_MS: '5000' }), startDispatcher()]);
    tenant = await createTenant([...models, shared]);
    const [multi, ...spread] = await Promise.all([createDevice(), createDevice(), createDevice(), createDevice()]);
    spreadIds.push(...spread.map((d) => d.id));
    devices.push(
      ...(await Promise.all([
        startDevice(dispatcher, multi.token, { models, tokens: 6, tokensPerSecond: 200 }),
        ...spread.map((d) => startDevice(dispatcher, d.token, { models: [shared], tokens: 6, tokensPerSecond: 100 })),
      ])),
    );
  });

  afterAll(async () => {
    await Promise.all(devices.map((d) => d.stop('SIGKILL')));
    await Promise.all([api.stop(), dispatcher.stop()]);
    await closeDb();
  });

  const chat = (model: string, content: string) =>
    http('POST', `${api.url}/v1/chat/completions`, {
      headers: { authorization: `Bearer ${tenant.key}` },
      body: { model, messages: [{ role: 'user', content }] },
    });

  test('one device serving three models takes a burst over all of them, one job after the other', async () => {
    for (let round = 0; round < 4; round++) {
      // Several jobs of one queue announced while the device is busy with another.
      const picks = [models[2], models[2], models[1], models[0], models[2], models[1]];
      const results = await Promise.all(picks.map((m, i) => chat(m, `round ${round} request ${i}`)));
      expect(results.map((r) => r.status)).toEqual(picks.map(() => 200));
      for (const res of results) {
        expect(res.body.choices[0].finish_reason).toBe('stop');
      }
    }
  });

  test('a burst on one model is spread over its idle devices, and every request is served', async () => {
    const results = await Promise.all(Array.from({ length: 12 }, (_, i) => chat(shared, `spread ${i}`)));
    expect(results.map((r) => r.status)).toEqual(results.map(() => 200));
    await recordsWritten();
    const rows = await db().task.findMany({
      where: { address: { in: results.map((r) => r.body.task_address) } },
      select: { deviceId: true, status: true },
    });
    expect(rows).toHaveLength(12);
    expect(rows.every((r) => r.status === 'completed')).toBe(true);
    const used = new Set(rows.map((r) => r.deviceId));
    expect([...used].sort()).toEqual([...spreadIds].sort());
  });
});
