import assert from 'node:assert/strict';
import { createDevice, createTenant, db, http, recordsWritten, uniq } from '../support/stack';
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
    assert.equal(res.status, 200, res.text);
    assert.match(res.body.task_address, TASK_ADDRESS);
    assert.ok(res.body.task_address.startsWith(`${res.body.mode}:`), res.text);
    const task = await completedTask(res.body.task_address);
    assert.equal(task.orgId, tenant.org.id);
    assert.equal(task.mode, res.body.mode);
    return { res, task };
  }

  test('org A: auto and direct go to its own device, network to the network device', async () => {
    for (const body of [{}, { mode: 'auto' }, { mode: 'direct' }]) {
      const { res, task } = await served(orgA, body);
      assert.equal(res.body.mode, 'direct', JSON.stringify(body));
      assert.match(res.body.task_address, /^direct:/);
      assert.equal(task.deviceId, directDeviceId, JSON.stringify(body));
    }
    const { res, task } = await served(orgA, { mode: 'network' });
    assert.equal(res.body.mode, 'network');
    assert.match(res.body.task_address, /^network:/);
    assert.equal(task.deviceId, networkDeviceId);

    // Streamed too: every chunk says direct.
    const sse = await postSse(relay.url, orgA.key, { model, messages: MESSAGES, stream: true, mode: 'auto' });
    assert.equal(sse.status, 200, sse.text);
    const chunks = sse.events.filter((e) => e !== '[DONE]');
    assert.ok(chunks.length > 0);
    assert.ok(chunks.every((c) => c.mode === 'direct' && c.task_address.startsWith('direct:')));
    assert.equal((await completedTask(chunks[0].task_address)).deviceId, directDeviceId);
  });

  test('org B: auto and network go to the network device, direct is 503 no_device_available', async () => {
    for (const body of [{}, { mode: 'auto' }, { mode: 'network' }]) {
      const { res, task } = await served(orgB, body);
      assert.equal(res.body.mode, 'network', JSON.stringify(body));
      assert.equal(task.deviceId, networkDeviceId);
    }
    const before = await taskCount(orgB.org.id);
    const res = await relay.chat(orgB.key, { model, messages: MESSAGES, mode: 'direct' });
    assertError(res, 503, 'no_device_available');
    // Streamed: still an HTTP error, not an event stream.
    const sse = await postSse(relay.url, orgB.key, { model, messages: MESSAGES, mode: 'direct', stream: true });
    assert.equal(sse.status, 503, sse.text);
    assert.equal(JSON.parse(sse.text).error.code, 'no_device_available');
    assert.equal(await taskCount(orgB.org.id), before);
  });

  test('org B is never served by org A’s device, even when A’s device is the idle one', async () => {
    const results = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        relay.chat(orgB.key, { model, messages: [{ role: 'user', content: `Isolation probe ${i}` }] }),
      ),
    );
    for (const res of results) {
      assert.equal(res.status, 200, res.text);
      assert.equal(res.body.mode, 'network');
      assert.equal((await completedTask(res.body.task_address)).deviceId, networkDeviceId);
    }
    await recordsWritten();
    assert.equal(await db().task.count({ where: { orgId: orgB.org.id, deviceId: directDeviceId } }), 0);
    const byDirect = await db().task.findMany({ where: { deviceId: directDeviceId } });
    assert.ok(byDirect.length > 0);
    assert.ok(byDirect.every((t) => t.orgId === orgA.org.id && t.mode === 'direct'));
  });

  test('a model with no device online is 503 no_device_available at once, in every mode', async () => {
    for (const tenant of [orgA, orgB]) {
      const before = await taskCount(tenant.org.id);
      for (const mode of ['auto', 'direct', 'network']) {
        const res = await relay.chat(tenant.key, { model: offlineModel, messages: MESSAGES, mode });
        assertError(res, 503, 'no_device_available');
      }
      const sse = await postSse(relay.url, tenant.key, { model: offlineModel, messages: MESSAGES, stream: true });
      assert.equal(sse.status, 503, sse.text);
      assert.equal(await taskCount(tenant.org.id), before);
    }
  });

  test('GET /v1/tasks/{task_address} returns the record to its org only', async () => {
    const res = await relay.chat(orgA.key, { model, messages: MESSAGES });
    assert.equal(res.status, 200, res.text);
    const address: string = res.body.task_address;
    const row = await completedTask(address);

    const mine = await http('GET', `${relay.api.url}/v1/tasks/${address}`, { headers: bearer(orgA.key) });
    assert.equal(mine.status, 200, mine.text);
    const view = mine.body;
    assert.equal(view.task_address, address);
    assert.equal(view.status, 'completed');
    assert.equal(view.model, model);
    assert.equal(view.mode, 'direct');
    assert.equal(view.api, 'openai');
    assert.equal(view.stream, false);
    assert.equal(view.device_id, directDeviceId);
    assert.equal(view.device_id, row.deviceId);
    assert.equal(view.finish_reason, 'stop');
    assert.equal(view.error_code, null);
    // The record says who counted the tokens: the device's own report, here.
    expect(view.usage).toEqual({ ...res.body.usage, source: 'device' });
    assert.match(view.output_sha256, SHA256_HEX);
    assert.equal(view.output_sha256, row.outputSha256);
    assert.equal(view.output_sha256, sha256(res.body.choices[0].message.content));
    for (const field of ['queued_at', 'assigned_at', 'first_token_at', 'finished_at']) {
      assert.equal(typeof view[field], 'string', `${field}: ${view[field]}`);
      assert.ok(!Number.isNaN(Date.parse(view[field])), `${field}: ${view[field]}`);
    }
    assert.ok(Date.parse(view.queued_at) <= Date.parse(view.finished_at));
    // The database row holds no prompt or completion text.
    assert.ok(
      !JSON.stringify(row, (_k, v: unknown) => (typeof v === 'bigint' ? String(v) : v)).includes(
        res.body.choices[0].message.content,
      ),
    );

    // Another org, a garbage address, and an unknown well-formed one: 404 task_not_found.
    const theirs = await http('GET', `${relay.api.url}/v1/tasks/${address}`, { headers: bearer(orgB.key) });
    assertError(theirs, 404, 'task_not_found');
    // The address percent-encoded (as a client library may send it) is the same task.
    const encoded = await http('GET', `${relay.api.url}/v1/tasks/${encodeURIComponent(address)}`, {
      headers: bearer(orgA.key),
    });
    assert.equal(encoded.status, 200, encoded.text);
    assert.equal(encoded.body.task_address, address);
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
    assert.equal(streamed.status, 200, streamed.text);
    assert.equal(streamed.body.stream, true);
    assert.equal(streamed.body.mode, 'network');
    assert.equal(streamed.body.device_id, networkDeviceId);
    assert.match(streamed.body.output_sha256, SHA256_HEX);
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
      assert.equal(res.status, 200, res.text);
      assert.equal(res.body.mode, 'network');
      assert.equal(res.body.choices[0].finish_reason, 'stop');
      addresses.add(res.body.task_address);
      const task = await completedTask(res.body.task_address);
      assert.equal(task.attempts, 1);
      devices.add(task.deviceId);
    }
    assert.equal(addresses.size, 10);
    expect([...devices].sort()).toEqual([...sharedDeviceIds].sort());
    await recordsWritten();
    const rows = await db().task.findMany({ where: { orgId: orgA.org.id, modelId: sharedModel } });
    assert.equal(rows.length, 10);
    assert.ok(rows.every((t) => t.status === 'completed'));
  });
});
