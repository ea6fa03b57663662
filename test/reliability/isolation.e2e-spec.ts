import { io } from 'socket.io-client';
import type { Socket } from 'socket.io-client';
import { PROTOCOL_VERSION, createRedis, KeySpace } from '@app/common';
import {
  ADMIN_TOKEN,
  REDIS_URL,
  closeDb,
  createDevice,
  createTenant,
  db,
  http,
  recordsWritten,
  sleep,
  taskCount,
  uniq,
  waitOnline,
} from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';
import {
  FakeDevice,
  LiveStream,
  adminAuth,
  assertOllamaError,
  assertOpenAIError,
  bearer,
  chatBody,
  eventually,
  jsonHttp,
  loopbackAddress,
  metricValue,
  sha256,
  sseContent,
  startApi,
  startDevice,
  startDispatcher,
  stopAll,
  waitStatus,
  waitTasks,
} from './helpers';

/**
 * Tenants cannot see each other, credentials cannot be swapped, revocations bite within the
 * documented bounds, secrets never reach a log, and a device is not trusted.
 */
describe('isolation and untrusted devices', () => {
  let api1: Api;
  let api2: Api;
  let dispatcher: Dispatcher;
  const devices: Proc[] = [];
  const sockets: Socket[] = [];
  /** Every secret this suite hands out, to look for in the processes' output at the end. */
  const secrets: string[] = [ADMIN_TOKEN];
  /** Client requests with wrong credentials come from their own address (failed-auth counter). */
  const from = loopbackAddress();

  const shared = uniq('shared');
  const privateModel = uniq('private');
  const directModel = uniq('direct');
  const rogueModel = uniq('rogue');
  let orgA: Tenant;
  let orgB: Tenant;
  let netDevice: { id: string; token: string };
  let directDevice: { id: string; token: string };
  let directProc: Proc;

  beforeAll(async () => {
    // Debug logging: whatever the processes print, no secret may be in it.
    const env = {
      LOG_LEVEL: 'debug',
      TASK_IDLE_TIMEOUT_MS: '4000',
      QUEUE_TIMEOUT_MS: '10000',
      ASSIGN_ACK_TIMEOUT_MS: '2000',
    };
    // The rogue device of these tests sends many invalid events on purpose; disconnecting it for that
    // (DEVICE_MAX_INVALID_EVENTS) has a test of its own in the hostile suite.
    [api1, api2, dispatcher] = await Promise.all([
      startApi(env),
      startApi(env),
      startDispatcher({ ...env, DEVICE_MAX_INVALID_EVENTS: '1000' }),
    ]);
    orgA = await createTenant([shared, privateModel, directModel]);
    orgB = await createTenant([shared, directModel, rogueModel]);
    netDevice = await createDevice();
    directDevice = await createDevice(orgA.org.name);
    secrets.push(orgA.key, orgB.key, netDevice.token, directDevice.token);
    const procs = await Promise.all([
      startDevice(
        dispatcher.url,
        netDevice.token,
        { models: [shared], tokensPerSecond: 10, tokens: 16, extraArgs: ['--log-level', 'debug'] },
        { pool: 'network' },
      ),
      startDevice(
        dispatcher.url,
        directDevice.token,
        { models: [privateModel, directModel], tokens: 4, extraArgs: ['--log-level', 'debug'] },
        { pool: orgA.org.id },
      ),
    ]);
    devices.push(...procs);
    directProc = procs[1];
  });

  afterAll(async () => {
    for (const s of sockets) {
      s.disconnect();
    }
    await stopAll(devices, [api1, api2, dispatcher].filter(Boolean));
    await closeDb();
  });

  const chat = (api: Api, key: string, model: string, content = 'hello', extra: Record<string, unknown> = {}) =>
    http('POST', `${api.url}/v1/chat/completions`, { headers: bearer(key), body: chatBody(model, content, extra) });

  /** A socket.io client on the device namespace, as a hand-written (possibly hostile) device. */
  function deviceSocket(auth: unknown): Socket {
    const socket = io(`${dispatcher.url}/devices`, {
      transports: ['websocket'],
      auth: auth as Record<string, unknown>,
      reconnection: false,
      forceNew: true,
    });
    sockets.push(socket);
    return socket;
  }

  /** The message of the handshake's connect_error, or 'connected'. */
  function handshake(auth: unknown): Promise<string> {
    const socket = deviceSocket(auth);
    return new Promise((resolve) => {
      socket.on('connect', () => {
        socket.disconnect();
        resolve('connected');
      });
      socket.on('connect_error', (err) => resolve(err.message));
    });
  }

  describe('tenants', () => {
    it("an org's key against another org's task: 404 task_not_found; the owner sees it", async () => {
      const res = await chat(api1, orgA.key, shared, 'a task of org A');
      expect(res).toMatchObject({ status: 200 });
      const address: string = res.body.task_address;
      const own = await http('GET', `${api2.url}/v1/tasks/${address}`, { headers: bearer(orgA.key) });
      expect(own).toMatchObject({ status: 200, body: { task_address: address } });
      for (const path of [address, address.replace(/^network:/, 'direct:')]) {
        for (const api of [api1, api2]) {
          assertOpenAIError(
            await http('GET', `${api.url}/v1/tasks/${path}`, { headers: bearer(orgB.key) }),
            404,
            'task_not_found',
          );
        }
      }
      assertOpenAIError(
        await http('GET', `${api1.url}/v1/tasks/${address}`, { headers: { 'x-api-key': orgB.key } }),
        404,
        'task_not_found',
      );
    });

    it("another org's model: 404 model_not_found on /v1/models/{id}, in the list, and for chat (both APIs)", async () => {
      const listB = await http('GET', `${api1.url}/v1/models`, { headers: bearer(orgB.key) });
      expect(listB.status).toBe(200);
      expect(listB.body.data.map((m: { id: string }) => m.id)).not.toContain(privateModel);
      assertOpenAIError(
        await http('GET', `${api1.url}/v1/models/${privateModel}`, { headers: bearer(orgB.key) }),
        404,
        'model_not_found',
        'model',
      );
      const before = await taskCount(orgB.org.id);
      assertOpenAIError(await chat(api2, orgB.key, privateModel), 404, 'model_not_found', 'model');
      const ollama = await http('POST', `${api2.url}/api/chat`, {
        headers: bearer(orgB.key),
        body: { model: privateModel, stream: false, messages: [{ role: 'user', content: 'hi' }] },
      });
      assertOllamaError(ollama, 404);
      const tags = await http('GET', `${api2.url}/api/tags`, { headers: bearer(orgB.key) });
      expect(tags.body.models.map((m: { name: string }) => m.name)).not.toContain(privateModel);
      expect(await taskCount(orgB.org.id)).toBe(before);
      // The owner is served (by its own device).
      expect(await chat(api1, orgA.key, privateModel)).toMatchObject({ status: 200, body: { mode: 'direct' } });
    });

    it("an org's own device never serves another org, even for a model both have", async () => {
      expect(await chat(api1, orgA.key, directModel)).toMatchObject({ status: 200, body: { mode: 'direct' } });
      for (const mode of ['auto', 'direct', 'network']) {
        assertOpenAIError(await chat(api1, orgB.key, directModel, 'hi', { mode }), 503, 'no_device_available');
      }
      await recordsWritten();
      const rows = await db().task.findMany({ where: { modelId: directModel } });
      expect(rows.length).toBeGreaterThan(0);
      expect(rows.filter((r) => r.orgId !== orgA.org.id)).toEqual([]);
    });

    it('a client key on /admin routes: 401 invalid_admin_token, nothing changed', async () => {
      const task = await db().task.findFirstOrThrow({ where: { orgId: orgA.org.id } });
      const key = await db().apiKey.findFirstOrThrow({ where: { orgId: orgA.org.id } });
      const routes: [string, string, unknown?][] = [
        ['GET', '/admin/orgs'],
        ['POST', '/admin/orgs', { name: uniq('evil') }],
        ['PATCH', `/admin/orgs/${orgB.org.name}`, { rpm: 1 }],
        ['GET', `/admin/orgs/${orgA.org.name}/keys`],
        ['POST', `/admin/orgs/${orgB.org.name}/keys`, {}],
        ['DELETE', `/admin/keys/${key.id}`],
        ['GET', '/admin/models'],
        ['POST', '/admin/models', { id: uniq('evil-model') }],
        ['PUT', `/admin/orgs/${orgB.org.name}/models/${privateModel}`],
        ['DELETE', `/admin/orgs/${orgA.org.name}/models/${privateModel}`],
        ['GET', '/admin/devices'],
        ['POST', '/admin/devices', { name: 'evil' }],
        ['DELETE', `/admin/devices/${directDevice.id}`],
        ['GET', `/admin/tasks/${task.address}`],
      ];
      // What these requests would have written (other suites write to the same tables meanwhile).
      const evilOrg = routes[1][2] as { name: string };
      const evilModel = routes[7][2] as { id: string };
      const state = async () =>
        Promise.all([
          db().organization.count({ where: { name: evilOrg.name } }),
          db().model.count({ where: { id: evilModel.id } }),
          db().device.count({ where: { name: 'evil' } }),
          db().apiKey.count({ where: { orgId: { in: [orgA.org.id, orgB.org.id] } } }),
          db().orgModel.count({ where: { orgId: { in: [orgA.org.id, orgB.org.id] } } }),
          db().device.count({ where: { id: directDevice.id, revokedAt: { not: null } } }),
        ]);
      const before = await state();
      for (const [method, path, body] of routes) {
        for (const headers of [bearer(orgA.key), { 'x-api-key': orgA.key }, bearer(netDevice.token)]) {
          // From an address each: after AUTH_FAILURES_PER_MINUTE failures an address gets 429 instead.
          const localAddress = loopbackAddress();
          const res = await jsonHttp(method, `${api1.url}${path}`, body, { headers, localAddress });
          assertOpenAIError(res, 401, 'invalid_admin_token');
        }
      }
      expect(await state()).toEqual(before);
      expect((await db().organization.findUniqueOrThrow({ where: { id: orgB.org.id } })).rpmLimit).toBeNull();
      expect((await db().apiKey.findUniqueOrThrow({ where: { id: key.id } })).revokedAt).toBeNull();
    });
  });

  describe('credentials are not interchangeable', () => {
    it('a device token as an API key: 401 on every client route', async () => {
      const token = netDevice.token;
      for (const headers of [bearer(token), { 'x-api-key': token }]) {
        assertOpenAIError(
          await jsonHttp('GET', `${api1.url}/v1/models`, undefined, { headers, localAddress: from }),
          401,
          'invalid_api_key',
        );
        assertOpenAIError(
          await jsonHttp('POST', `${api2.url}/v1/chat/completions`, chatBody(shared, 'hi'), {
            headers,
            localAddress: from,
          }),
          401,
          'invalid_api_key',
        );
        assertOllamaError(
          await jsonHttp('POST', `${api1.url}/api/chat`, chatBody(shared, 'hi'), { headers, localAddress: from }),
          401,
        );
        assertOllamaError(
          await jsonHttp('GET', `${api1.url}/api/tags`, undefined, { headers, localAddress: from }),
          401,
        );
      }
    });

    it('an API key (or the admin token) as a device token: refused at the handshake with invalid_device_token', async () => {
      const unknown = 'syd_' + 'Q'.repeat(40);
      for (const auth of [
        { token: orgA.key, protocol: PROTOCOL_VERSION },
        { token: ADMIN_TOKEN, protocol: PROTOCOL_VERSION },
        { token: unknown, protocol: PROTOCOL_VERSION },
        { token: netDevice.token.toUpperCase(), protocol: PROTOCOL_VERSION },
        { token: 42, protocol: PROTOCOL_VERSION },
        { protocol: PROTOCOL_VERSION },
        {},
      ]) {
        expect({ auth, answer: await handshake(auth) }).toEqual({ auth, answer: 'invalid_device_token' });
      }
      // A device token of its own (not the running agent's, whose connection a second one would replace).
      const spare = await createDevice();
      secrets.push(spare.token);
      expect(await handshake({ token: spare.token, protocol: PROTOCOL_VERSION })).toBe('connected');
    });
  });

  describe('revocation', () => {
    it('a revoked key is rejected within a second on every api instance', async () => {
      const tenant = await createTenant([shared]);
      secrets.push(tenant.key);
      for (const api of [api1, api2]) {
        expect(await http('GET', `${api.url}/v1/models`, { headers: bearer(tenant.key) })).toMatchObject({
          status: 200,
        });
      }
      const revoke = await http('DELETE', `${api1.url}/admin/keys/${tenant.keyId}`, { headers: adminAuth });
      expect(revoke).toMatchObject({ status: 200 });
      // Each api instance refuses it once its cached lookup (half a second) has run out; the bound is
      // generous for a loaded machine.
      const deadline = Date.now() + 10_000;
      await Promise.all(
        [api1, api2].map(async (api) => {
          for (;;) {
            const res = await jsonHttp('GET', `${api.url}/v1/models`, undefined, {
              headers: bearer(tenant.key),
              localAddress: from,
            });
            if (res.status === 401) {
              assertOpenAIError(res, 401, 'invalid_api_key');
              break;
            }
            expect(res).toMatchObject({ status: 200 });
            // Still accepted: until the deadline only.
            expect({ api: api.url, late: Date.now() >= deadline }).toEqual({ api: api.url, late: false });
            await sleep(50);
          }
        }),
      );
      assertOpenAIError(
        await jsonHttp('POST', `${api2.url}/v1/chat/completions`, chatBody(shared, 'hi'), {
          headers: bearer(tenant.key),
          localAddress: from,
        }),
        401,
        'invalid_api_key',
      );
    });

    it('a revoked device is disconnected and refused afterwards', async () => {
      const redis = createRedis(REDIS_URL);
      const online = async () =>
        (await redis.zrangebyscore(KeySpace.of(redis).presence(orgA.org.id, privateModel), Date.now(), '+inf')).some(
          (m) => m.startsWith(`${directDevice.id}|`),
        );
      try {
        // The direct device is online.
        expect(await online()).toBe(true);
        const revoke = await http('DELETE', `${api1.url}/admin/devices/${directDevice.id}`, { headers: adminAuth });
        expect(revoke).toMatchObject({ status: 200 });
        // Dispatchers look for revoked devices every second; the bound is generous for a loaded machine.
        await eventually(async () => !(await online()), 15_000, 'the revoked device to go offline');
      } finally {
        redis.disconnect();
      }
      // The agent stops when its token is refused.
      expect(await directProc.exited).toBe(1);
      expect(directProc.output).toMatch(/device token refused/);
      expect(await handshake({ token: directDevice.token, protocol: PROTOCOL_VERSION })).toBe('invalid_device_token');
      assertOpenAIError(await chat(api1, orgA.key, privateModel), 503, 'no_device_available');
    });
  });

  describe('untrusted devices', () => {
    let rogue: Socket;
    let rogueToken: string;
    const assignments: { payload: any; ack: (answer: unknown) => void }[] = [];

    async function connectRogue(): Promise<Socket> {
      const socket = deviceSocket({ token: rogueToken, protocol: PROTOCOL_VERSION });
      socket.on('task:assign', (payload: any, ack: (answer: unknown) => void) => {
        ack({ accepted: true });
        assignments.push({ payload, ack });
      });
      await new Promise<void>((resolve, reject) => {
        socket.once('connect', () => resolve());
        socket.once('connect_error', reject);
      });
      const announced = await socket.timeout(5_000).emitWithAck('announce', {
        agent_version: 'rogue-1',
        backend: 'sim',
        models: [rogueModel],
        features: [],
        available: true,
        running_task: null,
        identities: [],
      });
      expect(announced).toMatchObject({ ok: true });
      return socket;
    }

    async function nextAssignment(): Promise<any> {
      await eventually(async () => assignments.length > 0, 15_000, 'an assignment for the rogue device');
      return assignments.shift()!.payload;
    }

    async function invalidEvents(): Promise<Record<string, number>> {
      const text = (await http('GET', `${dispatcher.url}/metrics`)).text;
      const value = (reason: string) => metricValue(text, 'switchyard_device_invalid_events_total', { reason }) || 0;
      return { malformed: value('malformed'), foreign: value('foreign_task'), order: value('out_of_order') };
    }

    beforeAll(async () => {
      const device = await createDevice();
      rogueToken = device.token;
      secrets.push(rogueToken);
      rogue = await connectRogue();
    });

    it('junk, out-of-order, duplicate and foreign events are dropped and counted; no other task is touched', async () => {
      const before = await invalidEvents();
      // A rogue announce is refused, and the device stays as it was.
      const badAnnounce = await rogue.timeout(5_000).emitWithAck('announce', { models: 'all', available: 'yes' });
      expect(badAnnounce.ok).toBe(false);

      // The rogue device takes a task of org B (non-streamed).
      const rogueTask = chat(api1, orgB.key, rogueModel, 'rogue task');
      const assigned = await nextAssignment();
      const own: string = assigned.task_address;

      // A real device streams org A's answer meanwhile.
      const prompt = 'the victim of a rogue device';
      const victim = new LiveStream(
        `${api2.url}/v1/chat/completions`,
        orgA.key,
        chatBody(shared, prompt, { stream: true }),
      );
      await victim.waitFor(/"content":"[^"]+"/);
      const victimAddress: string = victim.events[0].task_address;

      // Junk that names no task of this device: dropped (and counted), the task goes on.
      const junk: [string, unknown][] = [
        ['task:delta', null],
        ['task:delta', 'text'],
        ['task:delta', 42],
        ['task:delta', [own]],
        ['task:delta', { seq: 0, choices: [{ index: 0, content: 'x' }] }],
        ['task:delta', { task_address: 'network:../../etc', seq: 0, choices: [{ index: 0, content: 'x' }] }],
        ['task:done', { task_address: own.toUpperCase(), seq: 0, finish_reasons: ['stop'], usage: null }],
        ['task:error', { task_address: 42, seq: 0, code: 'backend_error', message: 'x' }],
        ['__proto__', { polluted: true }],
        ['no:such:event', { task_address: own }],
      ];
      for (const [event, payload] of junk) {
        rogue.emit(event, payload);
      }
      // Events for the victim's task, which the rogue does not hold.
      rogue.emit('task:delta', { task_address: victimAddress, seq: 0, choices: [{ index: 0, content: 'INJECTED' }] });
      rogue.emit('task:delta', { task_address: victimAddress, seq: 1, choices: [{ index: 0, content: 'INJECTED' }] });
      rogue.emit('task:error', { task_address: victimAddress, seq: 2, code: 'backend_error', message: 'injected' });
      rogue.emit('task:done', { task_address: victimAddress, seq: 3, finish_reasons: ['stop'], usage: null });
      // Its own task: one good delta, the same seq again, a skipped seq, then the done that follows the good one.
      rogue.emit('task:delta', { task_address: own, seq: 0, choices: [{ index: 0, content: 'hello' }] });
      rogue.emit('task:delta', { task_address: own, seq: 0, choices: [{ index: 0, content: ' duplicate' }] });
      rogue.emit('task:delta', { task_address: own, seq: 5, choices: [{ index: 0, content: ' skipped' }] });
      rogue.emit('task:done', { task_address: own, seq: 1, finish_reasons: ['stop'], usage: null });

      expect(await rogueTask).toMatchObject({ status: 200, body: { choices: [{ message: { content: 'hello' } }] } });
      const ownRow = await waitTasks({ address: own }, (r) => r[0]?.status === 'completed', 10_000, 'the rogue task');
      expect(ownRow[0].outputSha256).toBe(sha256('hello'));

      await victim.done;
      expect(victim.status).toBe(200);
      expect(victim.events.at(-1)).toBe('[DONE]');
      const content = sseContent(victim.events);
      expect(victim.text).not.toMatch(/INJECTED|injected/);
      const reference = await chat(api1, orgB.key, shared, prompt);
      expect(reference).toMatchObject({ status: 200 });
      // The victim got exactly its own answer.
      expect(content).toBe(reference.body.choices[0].message.content);
      const victimRow = await waitTasks({ address: victimAddress }, (r) => r[0]?.status === 'completed');
      expect(victimRow[0]).toMatchObject({ outputSha256: sha256(content), deviceId: netDevice.id });

      const afterCounts = await invalidEvents();
      const counted = (key: keyof typeof before) => afterCounts[key] - before[key];
      expect({
        malformed: counted('malformed') >= 7,
        foreign: counted('foreign') >= 4,
        order: counted('order') >= 2,
      }).toEqual({ malformed: true, foreign: true, order: true });
      expect(dispatcher.proc.output).toMatch(/invalid event from device: ignored/);
      expect((await http('GET', `${dispatcher.url}/healthz`)).status).toBe(200);
    });

    it('a malformed or oversized event about its own task fails that task explicitly; other tasks are untouched', async () => {
      const before = await invalidEvents();
      const prompt = 'a victim beside a malformed device';
      const victim = new LiveStream(
        `${api2.url}/v1/chat/completions`,
        orgA.key,
        chatBody(shared, prompt, { stream: true }),
      );
      const bad: [string, (own: string) => unknown][] = [
        [
          'task:delta',
          (own) => ({
            task_address: own,
            seq: 1,
            choices: Array.from({ length: 9 }, (_, index) => ({ index: index % 8, content: 'x' })),
          }),
        ],
        ['task:delta', (own) => ({ task_address: own, seq: '1', choices: 'x' })],
        ['task:delta', (own) => ({ task_address: own, seq: 1, choices: [{ index: 99, content: 'x' }] })],
        ['task:done', (own) => ({ task_address: own, seq: 1, finish_reasons: ['exploded'], usage: null })],
        ['task:done', (own) => ({ task_address: own, seq: 1, finish_reasons: ['stop'], usage: { prompt_tokens: -1 } })],
        ['task:error', (own) => ({ task_address: own, seq: 1, code: 'DROP TABLE', message: 'x' })],
        ['task:error', (own) => ({ task_address: own, seq: 1, code: 'backend_error', message: 'm'.repeat(2_001) })],
      ];
      for (const [event, payload] of bad) {
        const pending = chat(api1, orgB.key, rogueModel, `malformed ${event}`);
        const own: string = (await nextAssignment()).task_address;
        rogue.emit('task:delta', { task_address: own, seq: 0, choices: [{ index: 0, content: 'ok' }] });
        rogue.emit(event, payload(own));
        const res = await pending;
        const what = `${event} ${JSON.stringify(payload(own)).slice(0, 120)}`;
        assertOpenAIError(res, 502);
        const row = (await waitTasks({ address: own }, (r) => r[0]?.status === 'failed', 10_000, what))[0];
        // An error code, and the hash of what was relayed.
        expect({ what, errorCode: row.errorCode !== null, outputSha256: row.outputSha256 }).toEqual({
          what,
          errorCode: true,
          outputSha256: sha256('ok'),
        });
      }
      await victim.done;
      expect(victim.events.at(-1)).toBe('[DONE]');
      const reference = await chat(api1, orgB.key, shared, prompt);
      expect(sseContent(victim.events)).toBe(reference.body.choices[0].message.content);
      const afterCounts = await invalidEvents();
      expect(afterCounts.malformed - before.malformed).toBeGreaterThanOrEqual(bad.length);
    });

    it('a device that stops sending for its task: the task ends timed_out (device_timeout), the client gets 504', async () => {
      const pending = chat(api1, orgB.key, rogueModel, 'silence');
      const assigned = await nextAssignment();
      rogue.emit('task:delta', { task_address: assigned.task_address, seq: 0, choices: [{ index: 0, content: 'a' }] });
      // seq 1 is never sent: every later event is dropped.
      rogue.emit('task:done', { task_address: assigned.task_address, seq: 2, finish_reasons: ['stop'], usage: null });
      const res = await pending;
      assertOpenAIError(res, 504, 'device_timeout');
      const row = await waitTasks({ address: assigned.task_address }, (r) => r[0]?.status === 'timed_out');
      expect(row[0].errorCode).toBe('device_timeout');
    });

    it('usage beyond what the database holds: the task still ends, as completed or as an invalid event', async () => {
      const before = await invalidEvents();
      const pending = chat(api1, orgB.key, rogueModel, 'huge usage');
      const assigned = await nextAssignment();
      const address: string = assigned.task_address;
      rogue.emit('task:delta', { task_address: address, seq: 0, choices: [{ index: 0, content: 'ok' }] });
      rogue.emit('task:done', {
        task_address: address,
        seq: 1,
        finish_reasons: ['stop'],
        usage: { prompt_tokens: 2 ** 31, completion_tokens: 2 ** 40, total_tokens: 2 ** 41 },
      });
      const res = await pending;
      const row = (await waitTasks({ address }, (r) => ['completed', 'failed', 'timed_out'].includes(r[0]?.status)))[0];
      const counted = (await invalidEvents()).malformed > before.malformed;
      // The message carries what the dispatcher logged about the task: an `expect` would not.
      if (!((res.status === 200 && row.status === 'completed') || counted)) {
        throw new Error(
          `neither stored nor rejected as invalid: the client got ${res.status} ${res.text}, the task ended ` +
            `${row.status} ${row.errorCode}; dispatcher said:\n${dispatcher.proc.output
              .split('\n')
              .filter((l) => l.includes(address) || l.includes('"level":50'))
              .slice(-5)
              .join('\n')}`,
        );
      }
    });

    it('a device that never acknowledges is not handed the same task again (no ack: "back for another device")', async () => {
      const model = uniq('no-ack');
      await db().model.create({ data: { id: model, network: true } });
      await db().orgModel.create({ data: { orgId: orgB.org.id, modelId: model } });
      const silent = await createDevice();
      secrets.push(silent.token);
      const fake = await FakeDevice.connect(dispatcher.url, silent.token, [model], { ack: false });
      // Online first: a request for a model no device serves yet gets its answer at once, not an assignment.
      await waitOnline([model], silent.token);
      try {
        const pending = chat(api1, orgB.key, model, 'nobody acknowledges');
        const first = await fake.nextAssignment();
        // The acknowledgement timeout (ASSIGN_ACK_TIMEOUT_MS=2000 here) put it back in the queue, the first
        // attempt used: the silent device, idle and the only one online, was there to take it again.
        await eventually(
          async () => {
            const task = await http('GET', `${api1.url}/v1/tasks/${first.task_address}`, { headers: bearer(orgB.key) });
            return task.body?.status === 'queued' && task.body?.attempts === 1;
          },
          15_000,
          'the task to be put back after the missing acknowledgement',
        );
        // Another device takes it.
        const healthy = await createDevice();
        secrets.push(healthy.token);
        devices.push(await startDevice(dispatcher.url, healthy.token, { models: [model], tokens: 3 }));
        expect(await pending).toMatchObject({ status: 200 });
        // As attempt 2: the silent device was not handed it again, whether before or after the healthy one came.
        const row = (await waitTasks({ address: first.task_address }, (r) => r[0]?.status === 'completed'))[0];
        expect(row.attempts).toBe(2);
        expect(fake.assignments.filter((a) => a.payload.task_address === first.task_address)).toEqual([]);
      } finally {
        fake.close();
      }
    });

    it('an event over DEVICE_MAX_EVENT_BYTES (256 KiB) drops the connection; the task it held fails explicitly', async () => {
      const pending = chat(api1, orgB.key, rogueModel, 'oversized frame');
      const assigned = await nextAssignment();
      const address: string = assigned.task_address;
      // The claim is recorded; the delta then reaches the dispatcher before the oversized event (one socket,
      // in order). A client that does not stream has its output held, so the task stays assigned meanwhile.
      await waitStatus(orgB.org.id, 'assigned');
      rogue.emit('task:delta', { task_address: address, seq: 0, choices: [{ index: 0, content: 'partial' }] });
      const disconnected = new Promise<string>((resolve) => rogue.once('disconnect', resolve));
      rogue.emit('task:delta', {
        task_address: address,
        seq: 1,
        choices: [
          { index: 0, content: 'y'.repeat(150_000) },
          { index: 1, content: 'z'.repeat(150_000) },
        ],
      });
      await disconnected;
      const res = await pending;
      assertOpenAIError(res, 502, 'device_disconnected');
      const row = (await waitTasks({ address }, (r) => r[0]?.status === 'failed'))[0];
      expect(row).toMatchObject({ errorCode: 'device_disconnected', outputSha256: sha256('partial') });
      // The dispatcher is fine and serves the real devices.
      expect(await chat(api2, orgA.key, shared, 'still serving')).toMatchObject({ status: 200 });
    });
  });

  describe('secrets', () => {
    it('keys and device tokens never appear in any process output', async () => {
      // One more round of everything that logs: requests, a failed authentication, failed and successful
      // device handshakes.
      expect((await chat(api1, orgA.key, shared, 'log me')).status).toBe(200);
      await jsonHttp('GET', `${api2.url}/v1/models`, undefined, {
        headers: bearer(netDevice.token),
        localAddress: from,
      });
      await handshake({ token: orgB.key, protocol: PROTOCOL_VERSION });
      const last = await createDevice();
      secrets.push(last.token);
      const connected = deviceSocket({ token: last.token, protocol: PROTOCOL_VERSION });
      sockets.push(connected);
      // The dispatcher's line for that connection has reached us: so has everything it printed before.
      await eventually(
        async () => dispatcher.proc.output.includes(last.id),
        15_000,
        "the dispatcher's log of the last connection",
      );
      const outputs: [string, string][] = [
        ['api1', api1.proc.output],
        ['api2', api2.proc.output],
        ['dispatcher', dispatcher.proc.output],
        ...devices.map((d, i): [string, string] => [`device ${i}`, d.output]),
      ];
      expect(outputs.filter(([, out]) => out.length === 0).map(([name]) => name)).toEqual([]);
      // What is found is named, never printed: a failure must not put a secret in the test's own output.
      const found: string[] = [];
      for (const [name, out] of outputs) {
        for (const secret of secrets) {
          if (out.includes(secret)) {
            found.push(`${name} printed a secret (${secret.slice(0, 7)}…)`);
          }
        }
        if (/sy_[0-9A-Za-z]{32,}/.test(out)) {
          found.push(`${name} printed something shaped like an API key`);
        }
        if (/syd_[0-9A-Za-z]{32,}/.test(out)) {
          found.push(`${name} printed something shaped like a device token`);
        }
      }
      expect(found).toEqual([]);
    });
  });
});
