import { ADMIN_TOKEN, createDevice, createTenant, db, http, recordsWritten, uniq } from '../support/stack';
import type { Tenant } from '../support/stack';
import { postSse } from '../support/sse';
import {
  MESSAGES,
  Relay,
  SHA256_HEX,
  TASK_ADDRESS,
  assertError,
  bearer,
  completedTask,
  sha256,
  taskCount,
} from './helpers';
import { expectStatus } from '../support/expect-status';

/**
 * Direct, network and auto routing, isolation between organizations, no device online, the task
 * record (GET /v1/tasks/{task_address}), and two devices sharing one model queue.
 */
describe('chat completions: routing, isolation, task records, shared queues', () => {
  const relay = new Relay();
  /** Has its own device for `model`. */
  let orgA: Tenant;
  /** Has `model` enabled but no device of its own. */
  let orgB: Tenant;
  const model = uniq('model');
  /** Enabled, but no device serves it. */
  const offlineModel = uniq('model');
  /** Served by two network devices. */
  const sharedModel = uniq('model');
  let directDeviceId: string;
  let networkDeviceId: string;
  let sharedDeviceIds: string[];

  beforeAll(async () => {
    await relay.start();
    // One after the other: createTenant upserts the catalog entries, which races when run in parallel.
    orgA = await createTenant([model, offlineModel, sharedModel]);
    orgB = await createTenant([model, offlineModel]);
    const [direct, network, shared1, shared2] = await Promise.all([
      createDevice(orgA.org.name),
      createDevice(),
      createDevice(),
      createDevice(),
    ]);
    directDeviceId = direct.id;
    networkDeviceId = network.id;
    sharedDeviceIds = [shared1.id, shared2.id];
    await relay.deviceSet([
      { token: direct.token, opts: { models: [model], tokens: 8 }, pool: orgA.org.id },
      { token: network.token, opts: { models: [model], tokens: 8 } },
      { token: shared1.token, opts: { models: [sharedModel], tokens: 6, ttftMs: 100 } },
      { token: shared2.token, opts: { models: [sharedModel], tokens: 6, ttftMs: 100 } },
    ]);
  });

  afterAll(() => relay.stop());

  async function served(tenant: Tenant, body: Record<string, unknown>) {
    const res = await relay.chat(tenant.key, { model, messages: MESSAGES, ...body });
    expectStatus(res, 200);
    expect(res.body.task_address).toMatch(TASK_ADDRESS);
    expect({ ok: res.body.task_address.startsWith(`${res.body.mode}:`), body: res.text }).toEqual(
      expect.objectContaining({ ok: true }),
    );
    const task = await completedTask(res.body.task_address);
    expect(task.orgId).toBe(tenant.org.id);
    expect(task.mode).toBe(res.body.mode);
    return { res, task };
  }

  test('org A: auto and direct go to its own device, network to the network device', async () => {
    for (const body of [{}, { mode: 'auto' }, { mode: 'direct' }]) {
      const { res, task } = await served(orgA, body);
      expect({ mode: res.body.mode, body }).toEqual(expect.objectContaining({ mode: 'direct' }));
      expect(res.body.task_address).toMatch(/^direct:/);
      expect({ deviceId: task.deviceId, body }).toEqual(expect.objectContaining({ deviceId: directDeviceId }));
    }
    const { res, task } = await served(orgA, { mode: 'network' });
    expect(res.body.mode).toBe('network');
    expect(res.body.task_address).toMatch(/^network:/);
    expect(task.deviceId).toBe(networkDeviceId);

    // Streamed too: every chunk says direct.
    const sse = await postSse(relay.url, orgA.key, { model, messages: MESSAGES, stream: true, mode: 'auto' });
    expectStatus(sse, 200);
    const chunks = sse.events.filter((e) => e !== '[DONE]');
    expect(chunks.length).toBeGreaterThan(0);
    expect(chunks.every((c) => c.mode === 'direct' && c.task_address.startsWith('direct:'))).toBe(true);
    expect((await completedTask(chunks[0].task_address)).deviceId).toBe(directDeviceId);
  });

  test('org B: auto and network go to the network device, direct is 503 no_device_available', async () => {
    for (const body of [{}, { mode: 'auto' }, { mode: 'network' }]) {
      const { res, task } = await served(orgB, body);
      expect({ mode: res.body.mode, body }).toEqual(expect.objectContaining({ mode: 'network' }));
      expect(task.deviceId).toBe(networkDeviceId);
    }
    const before = await taskCount(orgB.org.id);
    const res = await relay.chat(orgB.key, { model, messages: MESSAGES, mode: 'direct' });
    assertError(res, 503, 'no_device_available');
    // Streamed: still an HTTP error, not an event stream.
    const sse = await postSse(relay.url, orgB.key, { model, messages: MESSAGES, mode: 'direct', stream: true });
    expectStatus(sse, 503);
    expect(JSON.parse(sse.text).error.code).toBe('no_device_available');
    expect(await taskCount(orgB.org.id)).toBe(before);
  });

  test('org B is never served by org A’s device, even when A’s device is the idle one', async () => {
    const results = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        relay.chat(orgB.key, { model, messages: [{ role: 'user', content: `Isolation probe ${i}` }] }),
      ),
    );
    for (const res of results) {
      expectStatus(res, 200);
      expect(res.body.mode).toBe('network');
      expect((await completedTask(res.body.task_address)).deviceId).toBe(networkDeviceId);
    }
    await recordsWritten();
    expect(await db().task.count({ where: { orgId: orgB.org.id, deviceId: directDeviceId } })).toBe(0);
    const byDirect = await db().task.findMany({ where: { deviceId: directDeviceId } });
    expect(byDirect.length).toBeGreaterThan(0);
    expect(byDirect.every((t) => t.orgId === orgA.org.id && t.mode === 'direct')).toBe(true);
  });

  test('a model with no device online is 503 no_device_available at once, in every mode', async () => {
    for (const tenant of [orgA, orgB]) {
      const before = await taskCount(tenant.org.id);
      for (const mode of ['auto', 'direct', 'network']) {
        const res = await relay.chat(tenant.key, { model: offlineModel, messages: MESSAGES, mode });
        assertError(res, 503, 'no_device_available');
      }
      const sse = await postSse(relay.url, tenant.key, { model: offlineModel, messages: MESSAGES, stream: true });
      expectStatus(sse, 503);
      expect(await taskCount(tenant.org.id)).toBe(before);
    }
  });

  test('GET /v1/tasks/{task_address} returns the record to its org only', async () => {
    const res = await relay.chat(orgA.key, { model, messages: MESSAGES });
    expectStatus(res, 200);
    const address: string = res.body.task_address;
    const row = await completedTask(address);

    const mine = await http('GET', `${relay.api.url}/v1/tasks/${address}`, { headers: bearer(orgA.key) });
    expectStatus(mine, 200);
    const view = mine.body;
    expect(view.task_address).toBe(address);
    expect(view.status).toBe('completed');
    expect(view.model).toBe(model);
    expect(view.mode).toBe('direct');
    expect(view.api).toBe('openai');
    expect(view.stream).toBe(false);
    // The org's own (direct) device: its id, and the reference that stands for it in this org's records.
    expect(view.device_id).toBe(directDeviceId);
    expect(view.device_id).toBe(row.deviceId);
    expect(view.device_ref).toMatch(/^dev_[0-9a-f]{32}$/);
    expect(view.finish_reason).toBe('stop');
    expect(view.error_code).toBeNull();
    // The record says who counted the tokens: the device's own report, here.
    expect(view.usage).toEqual({ ...res.body.usage, source: 'device' });
    expect(view.output_sha256).toMatch(SHA256_HEX);
    expect(view.output_sha256).toBe(row.outputSha256);
    expect(view.output_sha256).toBe(sha256(res.body.choices[0].message.content));
    for (const field of ['queued_at', 'assigned_at', 'first_token_at', 'finished_at']) {
      expect({ type: typeof view[field], message: `${field}: ${view[field]}` }).toEqual(
        expect.objectContaining({ type: 'string' }),
      );
      expect({ ok: !Number.isNaN(Date.parse(view[field])), message: `${field}: ${view[field]}` }).toEqual(
        expect.objectContaining({ ok: true }),
      );
    }
    expect(Date.parse(view.queued_at)).toBeLessThanOrEqual(Date.parse(view.finished_at));
    // The database row holds no prompt or completion text.
    expect(JSON.stringify(row, (_k, v: unknown) => (typeof v === 'bigint' ? String(v) : v))).not.toContain(
      res.body.choices[0].message.content,
    );

    // Another org, a garbage address, and an unknown well-formed one: 404 task_not_found.
    const theirs = await http('GET', `${relay.api.url}/v1/tasks/${address}`, { headers: bearer(orgB.key) });
    assertError(theirs, 404, 'task_not_found');
    // The address percent-encoded (as a client library may send it) is the same task.
    const encoded = await http('GET', `${relay.api.url}/v1/tasks/${encodeURIComponent(address)}`, {
      headers: bearer(orgA.key),
    });
    expectStatus(encoded, 200);
    expect(encoded.body.task_address).toBe(address);
    const garbage = await http('GET', `${relay.api.url}/v1/tasks/not-a-task`, { headers: bearer(orgA.key) });
    assertError(garbage, 404, 'task_not_found');
    const otherMode = address.replace(/^direct:/, 'network:');
    const swapped = await http('GET', `${relay.api.url}/v1/tasks/${otherMode}`, { headers: bearer(orgA.key) });
    assertError(swapped, 404, 'task_not_found');
    const unknown = await http('GET', `${relay.api.url}/v1/tasks/direct:00000000-0000-4000-8000-000000000000`, {
      headers: bearer(orgA.key),
    });
    assertError(unknown, 404, 'task_not_found');

    // A streamed task's record too.
    const sse = await postSse(relay.url, orgB.key, { model, messages: MESSAGES, stream: true });
    const first = sse.events[0];
    await completedTask(first.task_address);
    const streamed = await http('GET', `${relay.api.url}/v1/tasks/${first.task_address}`, {
      headers: bearer(orgB.key),
    });
    expectStatus(streamed, 200);
    expect(streamed.body.stream).toBe(true);
    expect(streamed.body.mode).toBe('network');
    // A network device: no id, an opaque reference, stable for this org and another for the next one.
    expect(streamed.body.device_id).toBeNull();
    expect(streamed.body.device_ref).toMatch(/^dev_[0-9a-f]{32}$/);
    expect(streamed.body.device_ref).not.toContain(networkDeviceId.replace(/-/g, ''));
    expect(streamed.body.output_sha256).toMatch(SHA256_HEX);
    const again = await relay.chat(orgB.key, { model, messages: MESSAGES, mode: 'network' });
    expectStatus(again, 200);
    await completedTask(again.body.task_address);
    const sameOrg = await http('GET', `${relay.api.url}/v1/tasks/${again.body.task_address}`, {
      headers: bearer(orgB.key),
    });
    expect(sameOrg.body.device_ref).toBe(streamed.body.device_ref);
    const forA = await relay.chat(orgA.key, { model, messages: MESSAGES, mode: 'network' });
    expectStatus(forA, 200);
    await completedTask(forA.body.task_address);
    const otherOrg = await http('GET', `${relay.api.url}/v1/tasks/${forA.body.task_address}`, {
      headers: bearer(orgA.key),
    });
    expect([otherOrg.body.mode, otherOrg.body.device_id]).toEqual(['network', null]);
    expect(otherOrg.body.device_ref).toMatch(/^dev_[0-9a-f]{32}$/);
    expect(otherOrg.body.device_ref).not.toBe(streamed.body.device_ref);
    // An operator sees the device itself.
    const operator = await http('GET', `${relay.api.url}/admin/tasks/${first.task_address}`, {
      headers: bearer(ADMIN_TOKEN),
    });
    expect([operator.body.device_id, operator.body.device_ref]).toEqual([networkDeviceId, streamed.body.device_ref]);
  });

  test('two devices sharing one model queue both serve concurrent requests', async () => {
    const results = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        relay.chat(orgA.key, { model: sharedModel, messages: [{ role: 'user', content: `Shared request ${i}` }] }),
      ),
    );
    const addresses = new Set<string>();
    const devices = new Set<string | null>();
    for (const res of results) {
      expectStatus(res, 200);
      expect(res.body.mode).toBe('network');
      expect(res.body.choices[0].finish_reason).toBe('stop');
      addresses.add(res.body.task_address);
      const task = await completedTask(res.body.task_address);
      expect(task.attempts).toBe(1);
      devices.add(task.deviceId);
    }
    expect(addresses.size).toBe(10);
    expect([...devices].sort()).toEqual([...sharedDeviceIds].sort());
    await recordsWritten();
    const rows = await db().task.findMany({ where: { orgId: orgA.org.id, modelId: sharedModel } });
    expect(rows).toHaveLength(10);
    expect(rows.every((t) => t.status === 'completed')).toBe(true);
  });
});
