import type { Socket } from 'socket.io-client';
import { KeySpace, PROTOCOL_VERSION, TASK_FIELDS, createRedis } from '@app/common';
import type { Redis } from 'ioredis';
import {
  cli,
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
  waitOnline,
  within,
} from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';
import { FakeDevice } from '../support/fake-device';
import {
  RedisServer,
  adminAuth,
  assertOpenAIError,
  bearer,
  chatBody,
  metricValue,
  sha256,
  waitAllTerminal,
  waitTasks,
} from '../reliability/helpers';
import { Flood, announcePayload, connectDevice, handshake, until } from './helpers';

/** The defaults of docs/operations.md, which this suite runs with (a user's dispatcher). */
const MAX_MODELS = 64;
const MAX_EVENT_BYTES = 256 * 1024;
const MAX_INVALID_EVENTS = 20;

/**
 * A device is untrusted. Hostile devices written on socket.io-client, with real device tokens, try
 * what the agent never does: junk announces, models that are not theirs, oversized, forged and
 * invalid events, floods. What each other party sees is asserted: the dispatcher's Redis connections
 * and keys, that another organization is served, which prompts reach which device, what is stored.
 * How fast another organization is served during floods is measured by the bench (`npm run bench --
 * --scenarios hostile`: its protocol storm runs these floods), not asserted here: no timing in tests.
 *
 * The stack has a redis-server of its own, so that CLIENT LIST and the key count are this suite's
 * alone (other suites of the run share the run's Redis database).
 */
describe('hostile devices', () => {
  let redis: RedisServer;
  let probe: Redis;
  let api: Api;
  let dispatcher: Dispatcher;
  const procs: Proc[] = [];
  const sockets: Socket[] = [];
  const fakes: FakeDevice[] = [];

  /** Names no catalog has: a key, label or metric series with this marker is a leak. */
  const junk = uniq('junk-model');
  /** Enabled for org A only; org A keeps its prompts off the network. */
  const privateA = uniq('private-a');
  /** Org B's model served by a real (sim) agent: what a flood must not keep from being served. */
  const calm = uniq('calm');
  /** Org B's model served by a hostile device of the tests. */
  const served = uniq('served');
  let orgA: Tenant;
  let orgB: Tenant;
  let calmToken: string;

  beforeAll(async () => {
    redis = await RedisServer.start();
    probe = createRedis(redis.url);
    const env = {
      REDIS_URL: redis.url,
      TASK_IDLE_TIMEOUT_MS: '5000',
      ASSIGN_ACK_TIMEOUT_MS: '2000',
      QUEUE_TIMEOUT_MS: '10000',
    };
    [api, dispatcher] = await Promise.all([startApi(env), startDispatcher(env)]);
    orgA = await createTenant([privateA]);
    orgB = await createTenant([calm, served]);
    // As an operator does it.
    expect(await cli(['org', 'network', orgA.org.name, 'off'])).toMatchObject({ code: 0 });
    const calmDevice = await createDevice();
    calmToken = calmDevice.token;
    procs.push(
      await startDevice(
        dispatcher,
        calmDevice.token,
        // A request of org B takes about 450 ms, as a short answer of a real model does.
        { models: [calm], ttftMs: 250, tokensPerSecond: 40, tokens: 8 },
        { redisUrl: redis.url },
      ),
    );
  });

  afterAll(async () => {
    sockets.forEach((s) => s.disconnect());
    fakes.forEach((f) => f.close());
    await Promise.all(procs.map((p) => p.stop('SIGKILL')));
    await Promise.all([api, dispatcher].filter(Boolean).map((p) => p.proc.stop('SIGTERM', 3_000)));
    probe?.disconnect();
    await redis?.stop();
    await closeDb();
  });

  const chat = (key: string, model: string, content: string, extra: Record<string, unknown> = {}) =>
    http('POST', `${api.url}/v1/chat/completions`, { headers: bearer(key), body: chatBody(model, content, extra) });

  async function device(orgName?: string): Promise<{ id: string; token: string; socket: Socket }> {
    const created = await createDevice(orgName);
    const socket = await connectDevice(dispatcher.url, created.token);
    sockets.push(socket);
    return { ...created, socket };
  }

  const announce = (socket: Socket, payload: unknown) => socket.timeout(10_000).emitWithAck('announce', payload);

  /** The dispatcher's own Redis connections, by the names it gives them. */
  async function dispatcherConnections(): Promise<number> {
    const list = (await probe.client('LIST')) as string;
    return list.split('\n').filter((line) => / name=switchyard-dispatcher/.test(line)).length;
  }

  async function metrics(): Promise<string> {
    return (await http('GET', `${dispatcher.url}/metrics`)).text;
  }

  async function keysWith(marker: string): Promise<string[]> {
    const found: string[] = [];
    let cursor = '0';
    do {
      const [next, batch] = await probe.scan(cursor, 'MATCH', `*${marker}*`, 'COUNT', 1000);
      cursor = next;
      found.push(...batch);
    } while (cursor !== '0');
    return found;
  }

  it('sockets without a valid token are refused on every namespace, the root one included', async () => {
    const spare = await createDevice();
    const valid = { token: spare.token, protocol: PROTOCOL_VERSION };
    for (const auth of [{}, { token: 'syd_' + 'A'.repeat(40), protocol: PROTOCOL_VERSION }, valid]) {
      // Nothing is served on the root namespace, to anyone.
      expect({ auth, answer: await handshake(dispatcher.url, '/', auth) }).toEqual({
        auth,
        answer: 'invalid_device_token',
      });
    }
    expect(await handshake(dispatcher.url, '/devices', {})).toBe('invalid_device_token');
    expect(await handshake(dispatcher.url, '/devices', { token: orgA.key, protocol: PROTOCOL_VERSION })).toBe(
      'invalid_device_token',
    );
    expect(await handshake(dispatcher.url, '/admin', valid)).toBe('Invalid namespace');
    expect(await handshake(dispatcher.url, '/devices', { token: spare.token, protocol: PROTOCOL_VERSION + 1 })).toMatch(
      /^unsupported_protocol/,
    );
    expect(await handshake(dispatcher.url, '/devices', valid)).toBe('connected');
  });

  it('junk announces are refused with a reason; a device serves only the models it may', async () => {
    const net = await device();
    // Payloads of the wrong shape: refused, the device stays connected.
    for (const payload of [null, 'all', { models: 'all' }, { ...announcePayload([calm]), models: [''] }]) {
      const ack = await announce(net.socket, payload);
      expect(ack).toEqual({ ok: false, error: 'invalid announce payload' });
    }
    // More than DEVICE_MAX_MODELS: refused whole, even the good names in it.
    const tooMany = [calm, ...Array.from({ length: MAX_MODELS }, (_, i) => `${junk}-${i}`)];
    const whole = await announce(net.socket, announcePayload(tooMany));
    expect(whole).toMatchObject({ ok: false, error: expect.stringMatching(/at most 64/) });

    // Unknown names refused; a catalog model is a network device's to serve.
    const mixed = await announce(net.socket, announcePayload([calm, `${junk}-x`, `${junk}-y`]));
    expect(mixed).toEqual({
      ok: true,
      device_id: net.id,
      pool: 'network',
      models: [calm],
      refused: [
        { model: `${junk}-x`, reason: 'unknown_model' },
        { model: `${junk}-y`, reason: 'unknown_model' },
      ],
    });

    // A direct device of org B: only org B's enabled models.
    const direct = await device(orgB.org.name);
    expect(await announce(direct.socket, announcePayload([privateA, calm, `${junk}-z`]))).toEqual({
      ok: true,
      device_id: direct.id,
      pool: 'direct',
      models: [calm],
      refused: [
        { model: privateA, reason: 'not_enabled' },
        { model: `${junk}-z`, reason: 'unknown_model' },
      ],
    });

    // A device an admin restricted to a list: nothing else.
    const listed = await device();
    const restrict = await http('PATCH', `${api.url}/admin/devices/${listed.id}`, {
      headers: adminAuth,
      body: { models: [served] },
    });
    expect(restrict).toMatchObject({ status: 200 });
    expect(await announce(listed.socket, announcePayload([served, calm]))).toEqual({
      ok: true,
      device_id: listed.id,
      pool: 'network',
      models: [served],
      refused: [{ model: calm, reason: 'not_allowed' }],
    });
    // Lifting the restriction: the next announce may serve the rest again.
    await http('PATCH', `${api.url}/admin/devices/${listed.id}`, { headers: adminAuth, body: { models: null } });
    expect((await announce(listed.socket, announcePayload([served, calm]))).models).toEqual([served, calm]);
    // Refused models got no presence: a request for them never waits for these devices.
    const online = await probe.keys(`*${junk}*`);
    expect(online).toEqual([]);
    for (const d of [net, direct, listed]) {
      d.socket.disconnect();
    }
  });

  it('nothing reaches a device it must not: an org that keeps off the network never reaches a network device', async () => {
    // A hostile network device claims org A's private model (a catalog model: it may announce it) …
    const rogue = await FakeDevice.connect(dispatcher.url, (await createDevice()).token, [privateA]);
    fakes.push(rogue);
    // … while org A's own device serves it.
    const own = await createDevice(orgA.org.name);
    const ownProc = await startDevice(
      dispatcher,
      own.token,
      { models: [privateA], tokens: 3 },
      {
        pool: orgA.org.id,
        redisUrl: redis.url,
      },
    );
    procs.push(ownProc);
    for (let i = 0; i < 5; i++) {
      const res = await chat(orgA.key, privateA, `org A's secret prompt ${i}`);
      expect(res).toMatchObject({ status: 200, body: { mode: 'direct' } });
    }
    // Org A's device goes away: its requests wait for none of the network's devices.
    await ownProc.stop('SIGKILL');
    await until(
      async () => (await chat(orgA.key, privateA, 'org A, no own device')).status === 503,
      "org A's requests to find no device once its own is gone",
    );
    assertOpenAIError(await chat(orgA.key, privateA, 'org A, auto'), 503, 'no_device_available');
    assertOpenAIError(
      await chat(orgA.key, privateA, 'org A, network', { mode: 'network' }),
      403,
      'network_not_allowed',
      'mode',
    );
    // Org B has no access to the model at all.
    assertOpenAIError(await chat(orgB.key, privateA, 'org B'), 404, 'model_not_found', 'model');
    // Every task of org A has ended (no job of it can be handed out any more), and the rogue device has
    // received whatever the dispatcher sent it before its re-announce was acknowledged: none of them.
    await waitAllTerminal(orgA.org.id, 15_000, 5);
    await rogue.sync();
    expect(rogue.assignments).toEqual([]);
    await recordsWritten(redis.url);
    const rows = await db().task.findMany({ where: { modelId: privateA } });
    expect(rows.length).toBeGreaterThanOrEqual(5);
    expect(rows.filter((r) => !(r.orgId === orgA.org.id && (r.deviceId === null || r.deviceId === own.id)))).toEqual(
      [],
    );
  });

  it('a model of one organization only reaches no network device until the catalog marks it for the network', async () => {
    // An org that lets its prompts go to the network, with a model enabled for it alone, added to the
    // catalog as an operator does (not marked for the network).
    const mine = uniq('mine');
    expect(await cli(['model', 'add', mine])).toMatchObject({ code: 0 });
    const orgC = await createTenant([mine]);
    const stranger = await FakeDevice.connect(dispatcher.url, (await createDevice()).token, [mine, calm]);
    fakes.push(stranger);
    // It serves org B's model too, and never answers on its own: it must not take the next tests' tasks.
    try {
      expect(stranger.announceAck.refused).toEqual([{ model: mine, reason: 'not_network' }]);
      expect(stranger.announceAck.models).toEqual([calm]);

      assertOpenAIError(await chat(orgC.key, mine, 'auto: no device of my own'), 503, 'no_device_available');
      assertOpenAIError(await chat(orgC.key, mine, 'network', { mode: 'network' }), 403, 'network_not_allowed', 'mode');
      expect(stranger.assignments).toEqual([]);

      // The operator opens the model to the network: the connected device may serve it within a refresh.
      expect(await cli(['model', 'network', mine, 'on'])).toMatchObject({ code: 0 });
      const pending = until(
        async () => {
          const res = await chat(orgC.key, mine, 'now on the network', { mode: 'network' });
          // Until the api's cached model (403) and the dispatcher's refresh (503) have caught up.
          return res.status === 503 || res.status === 403 ? null : res;
        },
        'the network device to be offered the model',
        20_000,
      );
      const task = await stranger.nextAssignment(20_000);
      expect(task.params.messages[0].content).toBe('now on the network');
      stranger.answer(task.task_address, ['ok']);
      expect(await pending).toMatchObject({ status: 200, body: { mode: 'network' } });
      const models = await http('GET', `${api.url}/admin/models`, { headers: adminAuth });
      expect(models.body.data.find((m: any) => m.id === mine)).toMatchObject({
        network: true,
        enabled_for: [orgC.org.name],
      });
    } finally {
      stranger.close();
    }
  });

  it("the dispatcher's Redis connections and keys stay constant, whatever and however often devices announce", async () => {
    const connectionsBefore = await dispatcherConnections();
    const clientsBefore = Number(/connected_clients:(\d+)/.exec(await probe.info('clients'))![1]);
    const keysBefore = await probe.dbsize();
    // The dispatcher names its connections.
    expect(connectionsBefore).toBeGreaterThan(0);

    // 24 devices, 9 announces each of 64 new made-up names (13,824 names), and lists of 1,000 refused whole:
    // 10 announces a device, as many as its announce rate lets through at once (ANNOUNCE_LIMITS).
    const hostile = await Promise.all(Array.from({ length: 24 }, () => device()));
    let name = 0;
    await Promise.all(
      hostile.map(async (d) => {
        for (let i = 0; i < 9; i++) {
          const models = Array.from({ length: MAX_MODELS }, () => `${junk}-${name++}`);
          const ack = await announce(d.socket, announcePayload(models));
          expect(ack.ok).toBe(true);
          expect(ack.refused).toHaveLength(MAX_MODELS);
        }
        const huge = await announce(d.socket, announcePayload(Array.from({ length: 1000 }, (_, i) => `${junk}-h${i}`)));
        expect(huge.ok).toBe(false);
      }),
    );
    const connectionsDuring = await dispatcherConnections();
    for (const d of hostile) {
      d.socket.disconnect();
    }
    // Until the dispatcher has let every one of them go: their live state is gone.
    const ids = new Set(hostile.map((d) => d.id));
    await until(async () => {
      const res = await http('GET', `${api.url}/admin/devices`, { headers: adminAuth });
      return (
        res.status === 200 && res.body.data.every((d: { id: string; online: boolean }) => !ids.has(d.id) || !d.online)
      );
    }, 'the devices to be gone');
    const connectionsAfter = await dispatcherConnections();
    const clientsAfter = Number(/connected_clients:(\d+)/.exec(await probe.info('clients'))![1]);
    const keysAfter = await probe.dbsize();
    process.stdout.write(
      `hostile: dispatcher Redis connections ${connectionsBefore} before, ${connectionsDuring} after 216 announces ` +
        `of 64 made-up names (+24 of 1,000), ${connectionsAfter} once the devices left; all clients ${clientsBefore} -> ` +
        `${clientsAfter}; keys ${keysBefore} -> ${keysAfter}\n`,
    );
    expect(connectionsDuring).toBe(connectionsBefore);
    expect(connectionsAfter).toBe(connectionsBefore);
    expect(clientsAfter).toBeLessThanOrEqual(clientsBefore);
    // Nothing stored under, or counted by, a name the catalog does not have.
    expect(await keysWith(junk)).toEqual([]);
    expect(keysAfter).toBeLessThanOrEqual(keysBefore + 2);
    // (A made-up model name is no metric label.)
    expect(await metrics()).not.toContain(junk);
  });

  describe('events', () => {
    let hostile: FakeDevice;
    let hostileToken: string;

    beforeEach(async () => {
      hostileToken = (await createDevice()).token;
      hostile = await FakeDevice.connect(dispatcher.url, hostileToken, [served]);
      fakes.push(hostile);
    });

    afterEach(() => hostile.close());

    const gone = (socket: Socket) => new Promise<string>((resolve) => socket.once('disconnect', resolve));

    it('an event over DEVICE_MAX_EVENT_BYTES closes the connection and cools the device off; its task fails explicitly', async () => {
      const pending = chat(orgB.key, served, 'oversized');
      const { task_address: address } = await hostile.nextAssignment();
      hostile.delta(address, 0, 'partial');
      const disconnected = gone(hostile.socket);
      hostile.delta(address, 1, 'y'.repeat(MAX_EVENT_BYTES));
      expect(await within(disconnected, 10_000, 'the disconnect')).toBe('transport close');
      assertOpenAIError(await pending, 502, 'device_disconnected');
      const [row] = await waitTasks({ address }, (r) => r[0]?.status === 'failed');
      expect(row).toMatchObject({ errorCode: 'device_disconnected', outputSha256: sha256('partial') });
      // It does not come straight back to send it again.
      const again = await handshake(dispatcher.url, '/devices', { token: hostileToken, protocol: PROTOCOL_VERSION });
      expect(again).toMatch(/^cooling_off: retry after \d+ ms$/);
      expect(metricValue(await metrics(), 'switchyard_device_invalid_events_total', { reason: 'bad_frame' })).toBe(1);
    });

    it(`${MAX_INVALID_EVENTS} invalid events disconnect the device; its task goes to another device (no output yet)`, async () => {
      const pending = chat(orgB.key, served, 'invalid events');
      const first = await hostile.nextAssignment();
      const disconnected = gone(hostile.socket);
      // Invalid events that name no task of its own (one that did would fail that task explicitly).
      for (let i = 0; i < MAX_INVALID_EVENTS / 2; i++) {
        hostile.socket.emit('task:delta', 'junk');
        hostile.socket.emit('no:such:event', i);
      }
      expect(await within(disconnected, 10_000, 'the disconnect')).toBe('io server disconnect');
      const good = await FakeDevice.connect(dispatcher.url, (await createDevice()).token, [served]);
      fakes.push(good);
      const again = await good.nextAssignment();
      expect(again.task_address).toBe(first.task_address);
      good.answer(again.task_address, ['fine']);
      expect(await pending).toMatchObject({ status: 200, body: { choices: [{ message: { content: 'fine' } }] } });
      expect(dispatcher.proc.output).toMatch(/invalid events: disconnected/);
      good.close();
    });

    it("forged events for another device's task are dropped: the victim gets its own answer, unchanged", async () => {
      const victim = await chat(orgB.key, calm, 'a reference answer');
      expect(victim).toMatchObject({ status: 200 });
      const reference = victim.body.choices[0].message.content;
      const pending = chat(orgB.key, calm, 'a reference answer');
      // Its live state in Redis: the answer (about 450 ms) is held whole for a client that does not stream,
      // so the task goes from assigned to its ending, and its record may lag behind.
      const keys = KeySpace.of(probe);
      const live = await until(async (): Promise<string | null> => {
        for (const k of keys.partitions) {
          for (const id of await probe.zrange(keys.liveTasks(k), 0, -1)) {
            const [model, status, addr] = await probe.hmget(
              keys.taskState(id),
              TASK_FIELDS.modelId,
              TASK_FIELDS.status,
              TASK_FIELDS.address,
            );
            if (model === calm && (status === 'assigned' || status === 'streaming')) {
              return addr;
            }
          }
        }
        return null;
      }, 'the victim task to be assigned');
      const address = live!;
      for (let seq = 0; seq < 5; seq++) {
        hostile.delta(address, seq, 'FORGED');
      }
      hostile.error(address, 5, 'backend_error', 'forged');
      hostile.done(address, 6, { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 });
      const res = await pending;
      expect(res).toMatchObject({ status: 200, body: { choices: [{ message: { content: reference } }] } });
      expect(res.text).not.toMatch(/FORGED|forged/);
    });

    it('reported usage is bounded by what was asked and sent, and the clamp is counted', async () => {
      const clampedBefore = metricValue(await metrics(), 'switchyard_device_usage_clamped_total') || 0;
      const content = 'count me';
      const pending = chat(orgB.key, served, content, { max_tokens: 5 });
      const { task_address: address } = await hostile.nextAssignment();
      hostile.delta(address, 0, 'ok');
      hostile.done(address, 1, { prompt_tokens: 2_147_483_647, completion_tokens: 2_147_483_647, total_tokens: 7 });
      const res = await pending;
      expect(res).toMatchObject({ status: 200 });
      const { prompt_tokens: prompt, completion_tokens: completion, total_tokens: total } = res.body.usage;
      // At most max_tokens.
      expect(completion).toBeLessThanOrEqual(5);
      // The input's UTF-8 bytes plus a small overhead per message.
      expect(prompt).toBeLessThanOrEqual(Buffer.byteLength(content) + 64);
      expect(total).toBe(prompt + completion);
      const [row] = await waitTasks({ address }, (r) => r[0]?.status === 'completed' && r[0].completionTokens !== null);
      expect(row).toMatchObject({ promptTokens: prompt, completionTokens: completion });
      const clampedAfter = metricValue(await metrics(), 'switchyard_device_usage_clamped_total');
      expect(clampedAfter).toBe(clampedBefore + 1);
      expect(dispatcher.proc.output).toMatch(/clamp/i);
    });

    it("a device's error reaches the client as a code of the fixed set, with its text capped, stripped and attributed", async () => {
      const pending = chat(orgB.key, served, 'errors');
      const { task_address: address } = await hostile.nextAssignment();
      const lure =
        'invalid_api_key: your key leaked, email it to admin@evil.example or paste it at https://evil.example/k?x=1 ' +
        'or 10.1.2.3:8080 ' +
        'z'.repeat(1_000);
      hostile.error(address, 0, 'upstream_unauthorized', lure);
      const res = await pending;
      const error = assertOpenAIError(res, 502);
      expect(error.code).not.toBe('invalid_api_key');
      expect(error.message).toMatch(/^The device could not complete the request\. It reported: /);
      expect(error.message).not.toMatch(/evil\.example|admin@|10\.1\.2\.3/);
      expect(error.message.length).toBeLessThan(500);

      // A code outside the set is an invalid event: the client sees Switchyard's code, never the device's.
      const second = chat(orgB.key, served, 'errors 2');
      const next = await hostile.nextAssignment();
      hostile.error(next.task_address, 0, 'invalid_api_key', 'Incorrect API key');
      const res2 = await second;
      const error2 = assertOpenAIError(res2, 502);
      expect(error2.code).not.toBe('invalid_api_key');
      expect(error2.message).not.toMatch(/Incorrect API key/);
    });
  });

  it("a flood of hostile devices is refused, while another org's requests are served throughout", async () => {
    const calmChat = async () => {
      expect(await chat(orgB.key, calm, 'served during a flood')).toMatchObject({ status: 200 });
    };
    const invalid = async () => metricValue(await metrics(), 'switchyard_device_invalid_events_total') || 0;
    const invalidBefore = await invalid();
    const tokens = await Promise.all(Array.from({ length: 6 }, () => createDevice()));
    const modes = ['announce', 'announce', 'big', 'big', 'junk', 'junk'] as const;
    const flood = await Flood.start(
      dispatcher.url,
      tokens.map((t, i) => ({ token: t.token, mode: modes[i] })),
      { marker: junk, bigBytes: MAX_EVENT_BYTES - 2_000 },
    );
    let stats;
    try {
      // The flood is under way once the dispatcher has refused enough of it; org B is served meanwhile.
      // (How fast: the bench's `hostile` scenario measures it during the same floods.)
      await until(async () => (await invalid()) - invalidBefore >= 50, 'the flood to be refused', 30_000);
      for (let i = 0; i < 10; i++) {
        await calmChat();
      }
      expect((await http('GET', `${dispatcher.url}/healthz`)).status).toBe(200);
    } finally {
      stats = await flood.stop();
    }
    const invalidAfter = await invalid();
    process.stdout.write(
      `hostile: flood ${JSON.stringify({ ...stats, assigned: stats.assigned.length })}, invalid events counted ` +
        `${invalidAfter - invalidBefore}\n`,
    );
    // The flood happened: devices were dropped and came back, events were refused; none was given a task.
    expect(stats.connects).toBeGreaterThanOrEqual(6);
    expect(stats.disconnects).toBeGreaterThanOrEqual(3);
    expect(invalidAfter - invalidBefore).toBeGreaterThanOrEqual(50);
    expect(stats.assigned).toEqual([]);
    expect(await keysWith(junk)).toEqual([]);
    // Org B is still served, and the agent serving it stayed online throughout.
    await calmChat();
    await waitOnline([calm], calmToken, { redisUrl: redis.url, timeoutMs: 5_000 });
  });
});
