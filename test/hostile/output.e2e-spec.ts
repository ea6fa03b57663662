import { request as httpRequest } from 'node:http';
import type { IncomingMessage } from 'node:http';
import { createRedis, KeySpace } from '@app/common';
import type { Redis } from 'ioredis';
import {
  closeDb,
  createDevice,
  createTenant,
  db,
  http,
  recordsWritten,
  sleep,
  startApi,
  startDevice,
  startDispatcher,
  uniq,
  waitOnline,
} from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';
import { FakeDevice } from '../support/fake-device';
import { LiveStream, RedisServer, bearer, chatBody, sseEvents } from '../reliability/helpers';
import { until } from './helpers';

/** This suite's device byte budget: a flood at full budget moves enough in a few seconds. */
const BYTES_PER_SECOND = 16 * 1024 * 1024;

/**
 * A device's output is bounded by what the request allows, and a task's stream in Redis by what the
 * api has not read yet: a device that floods cannot exhaust Redis (and with it every tenant), and a
 * client that does not read cannot make the api buffer what the device sends. The stack runs on a
 * redis-server of its own, so that its memory, its keys and its `maxmemory` are this suite's alone.
 */
describe('hostile device output', () => {
  let redis: RedisServer;
  let probe: Redis;
  let api: Api;
  let dispatcher: Dispatcher;
  const procs: Proc[] = [];
  const fakes: FakeDevice[] = [];

  /** Served by this suite's hand-written network devices. */
  const flooded = uniq('flooded');
  /** Org B's model, served by its own (direct) sim agent: what a flood must not take down. */
  const own = uniq('own');
  let orgA: Tenant;
  let orgB: Tenant;

  beforeAll(async () => {
    redis = await RedisServer.start();
    probe = createRedis(redis.url);
    const env = {
      REDIS_URL: redis.url,
      DEVICE_MAX_BYTES_PER_SECOND: String(BYTES_PER_SECOND),
      TASK_IDLE_TIMEOUT_MS: '20000',
    };
    [api, dispatcher] = await Promise.all([startApi(env), startDispatcher(env)]);
    orgA = await createTenant([flooded]);
    orgB = await createTenant([own]);
    const direct = await createDevice(orgB.org.name);
    procs.push(
      await startDevice(
        dispatcher,
        direct.token,
        { models: [own], tokens: 4 },
        { redisUrl: redis.url, pool: orgB.org.id },
      ),
    );
  });

  afterAll(async () => {
    fakes.forEach((f) => f.close());
    await Promise.all(procs.map((p) => p.stop('SIGKILL')));
    await Promise.all([api, dispatcher].filter(Boolean).map((p) => p.proc.stop('SIGTERM', 3_000)));
    probe?.disconnect();
    await redis?.stop();
    await closeDb();
  });

  afterEach(() => {
    // A test's devices go with it: the next test's tasks must reach its own.
    fakes.splice(0).forEach((f) => f.close());
  });

  async function floodDevice(): Promise<FakeDevice> {
    const { token } = await createDevice();
    const device = await FakeDevice.connect(dispatcher.url, token, [flooded]);
    fakes.push(device);
    // The announce's ack comes before its presence is published: a request sent in between finds none.
    await waitOnline([flooded], token, { redisUrl: redis.url });
    return device;
  }

  const usedMemory = async () => Number(/used_memory:(\d+)/.exec(await probe.info('memory'))![1]);
  const taskIdOf = (address: string) => address.slice(address.indexOf(':') + 1);
  const streamOf = (address: string) => KeySpace.of(probe).taskStream(taskIdOf(address));

  /**
   * Sends `count` deltas of `size` characters, paced within the device's byte budget; stops early when
   * the dispatcher cancels the task or drops the device. Returns the next sequence number.
   */
  async function flood(device: FakeDevice, address: string, from: number, count: number, size: number) {
    const piece = 'x'.repeat(size);
    const perTick = Math.max(1, Math.floor(BYTES_PER_SECOND / 2 / 50 / size));
    let seq = from;
    while (seq < from + count && !device.cancels.includes(address) && device.socket.connected) {
      for (let i = 0; i < perTick && seq < from + count; i++) {
        device.delta(address, seq++, piece);
      }
      await sleep(20);
    }
    return seq;
  }

  const contentOf = (text: string) =>
    sseEvents(text)
      .map((e) => e.choices?.[0]?.delta?.content ?? '')
      .join('');

  it('a device answering max_tokens 5 with 100 KB deltas is stopped at the bound: the client gets 5 tokens and an error, Redis does not grow', async () => {
    const device = await floodDevice();
    const before = await usedMemory();
    const live = new LiveStream(
      `${api.url}/v1/chat/completions`,
      orgA.key,
      chatBody(flooded, 'flood me', { stream: true, max_tokens: 5 }),
    );
    const task = await device.nextAssignment();
    ['one', ' two', ' three', ' four', ' five'].forEach((t, seq) => device.delta(task.task_address, seq, t));
    // About 2 MB a second of 100 KB deltas, as the review's device did, for up to 5 s.
    await flood(device, task.task_address, 5, 100, 100_000);
    await live.done;

    expect(live.status).toBe(200);
    const content = contentOf(live.text);
    expect(content.length).toBeLessThan(1_000);
    expect(content).toBe('one two three four five');
    const last = sseEvents(live.text).at(-1);
    expect(last?.error?.code).toBe('device_output_exceeded');
    await until(async () => device.cancels.includes(task.task_address), 'the cancel of the flooding device');
    expect(await usedMemory()).toBeLessThan(before + 2 * 1024 * 1024);
    await until(async () => (await probe.exists(streamOf(task.task_address))) === 0, 'the stream to be deleted');

    await recordsWritten(redis.url);
    const row = await db().task.findUniqueOrThrow({ where: { address: task.task_address } });
    expect([row.status, row.errorCode]).toEqual(['failed', 'device_output_exceeded']);
  }, 30_000);

  it('a client that does not read: the api stops reading its stream, which waits in Redis; read later, the answer is whole and in order', async () => {
    const device = await floodDevice();
    const body = JSON.stringify(chatBody(flooded, 'slow reader', { stream: true, max_tokens: 100_000 }));
    let response!: IncomingMessage;
    const opened = new Promise<void>((resolve, reject) => {
      const req = httpRequest(
        `${api.url}/v1/chat/completions`,
        { method: 'POST', headers: { ...bearer(orgA.key), 'content-type': 'application/json' }, agent: false },
        (res) => {
          // Not read: the kernel's buffers hold a few MB, the rest must wait upstream.
          res.pause();
          response = res;
          resolve();
        },
      );
      req.on('error', reject);
      req.end(body);
    });
    const task = await device.nextAssignment();
    await opened;
    // 20 MB, far more than loopback's socket buffers hold, within the request's bound.
    const count = 2_500;
    const size = 8_000;
    const end = await flood(device, task.task_address, 0, count, size);
    // Not stopped while sending what the request allows.
    expect(end).toBe(count);
    device.done(task.task_address, count, null, 'length');

    // The task ended on the device's side, but the api has not read the end of it: its stream is
    // still in Redis (the api deletes it when it has read the ending), with the unread entries.
    await until(async () => {
      await recordsWritten(redis.url);
      const row = await db().task.findUniqueOrThrow({ where: { address: task.task_address } });
      return row.status === 'completed';
    }, 'the task to be recorded completed');
    await sleep(500);
    expect(await probe.xlen(streamOf(task.task_address))).toBeGreaterThan(0);

    const chunks: Buffer[] = [];
    response.on('data', (c: Buffer) => chunks.push(c));
    response.resume();
    await new Promise<void>((resolve) => response.on('end', () => resolve()));
    const text = Buffer.concat(chunks).toString('utf8');
    const content = contentOf(text);
    expect(content.length).toBe(count * size);
    // Compared whole, not diffed: a failure would print 20 MB.
    expect(content === 'x'.repeat(count * size)).toBe(true);
    expect(sseEvents(text).at(-2)).toMatchObject({ choices: [{ finish_reason: 'length' }] });
    await until(async () => (await probe.exists(streamOf(task.task_address))) === 0, 'the stream to be deleted');
  }, 60_000);

  it('a reading client: what the api has read is trimmed from the stream while the answer goes on', async () => {
    const device = await floodDevice();
    const live = new LiveStream(
      `${api.url}/v1/chat/completions`,
      orgA.key,
      chatBody(flooded, 'long answer', { stream: true, max_tokens: 10_000 }),
    );
    const task = await device.nextAssignment();
    const sent = await flood(device, task.task_address, 0, 250, 4_000);
    expect(sent).toBe(250);
    // The client has read the whole 1 MB: the stream keeps at most about the last trim's worth.
    await until(async () => contentOf(live.text).length === 250 * 4_000, 'the client to read what was sent');
    const stream = streamOf(task.task_address);
    await until(
      async () => ((await probe.memory('USAGE', stream)) ?? 0) < 256 * 1024,
      'the stream to be trimmed to what the api has not read',
      5_000,
    );
    device.done(task.task_address, sent);
    await live.done;
    expect(sseEvents(live.text).at(-2)).toMatchObject({ choices: [{ finish_reason: 'stop' }] });
  }, 30_000);

  it('a client that goes away: the task stream is deleted and stays deleted while the device goes on sending', async () => {
    const device = await floodDevice();
    const live = new LiveStream(
      `${api.url}/v1/chat/completions`,
      orgA.key,
      chatBody(flooded, 'leave early', { stream: true, max_tokens: 100_000 }),
    );
    const task = await device.nextAssignment();
    const sending = flood(device, task.task_address, 0, 2_000, 1_000);
    await live.waitFor(/x{1000}/);
    live.abort();
    await sending;
    // The dispatcher works through the flood it has received before the cancel reaches the device: on a
    // busy machine that can take longer than until's default.
    await until(async () => device.cancels.includes(task.task_address), 'the cancel of the device', 45_000);
    // Output already on its way when the cancel came must not bring the stream back.
    device.delta(task.task_address, 2_000, 'late');
    // Handled by the dispatcher (dropped) before this returns.
    await device.sync();
    expect(await probe.exists(streamOf(task.task_address))).toBe(0);
    await recordsWritten(redis.url);
    const row = await db().task.findUniqueOrThrow({ where: { address: task.task_address } });
    expect([row.status, row.errorCode]).toEqual(['cancelled', 'client_disconnected']);
  }, 90_000);

  it('two devices flooding at full budget with Redis capped: another organization is served throughout, and Redis stays under its cap', async () => {
    const cap = (await usedMemory()) + 16 * 1024 * 1024;
    await probe.config('SET', 'maxmemory', String(cap));
    try {
      const devices = await Promise.all([floodDevice(), floodDevice()]);
      const streams = devices.map(
        (_, i) =>
          new LiveStream(
            `${api.url}/v1/chat/completions`,
            orgA.key,
            chatBody(flooded, `flood ${i}`, { stream: true, max_tokens: 4_096 }),
          ),
      );
      // Two jobs, two idle devices: one each.
      const tasks = await Promise.all(devices.map((d) => d.nextAssignment()));
      let peak = 0;
      const sampler = setInterval(() => void usedMemory().then((m) => (peak = Math.max(peak, m))), 50);
      try {
        // Each tries to send 40 MB at its full budget; the request allows about 1 MB.
        await Promise.all(devices.map((d, i) => flood(d, tasks[i].task_address, 0, 400, 100_000)));
        await Promise.all(streams.map((s) => s.done));
        for (let i = 0; i < 5; i++) {
          const res = await http('POST', `${api.url}/v1/chat/completions`, {
            headers: bearer(orgB.key),
            body: chatBody(own, `still here ${i}`),
          });
          expect(res).toMatchObject({ status: 200 });
        }
      } finally {
        clearInterval(sampler);
      }
      expect(peak).toBeLessThan(cap);
      for (const s of streams) {
        expect(sseEvents(s.text).at(-1)?.error?.code).toBe('device_output_exceeded');
      }
    } finally {
      await probe.config('SET', 'maxmemory', '0');
    }
  }, 60_000);

  it('/readyz on the api and the dispatcher says when Redis answers but refuses writes (over maxmemory)', async () => {
    const used = await usedMemory();
    await probe.config('SET', 'maxmemory', String(Math.floor(used / 2)));
    try {
      for (const server of [api, dispatcher]) {
        const res = await until(
          async () => {
            const r = await http('GET', `${server.url}/readyz`);
            return r.status === 503 ? r : null;
          },
          'readiness to fail',
          10_000,
        );
        expect(res!.body.checks.redis).toBe('refuses_writes');
        expect(res!.body.error.code).toBe('service_unavailable');
      }
    } finally {
      await probe.config('SET', 'maxmemory', '0');
    }
    for (const server of [api, dispatcher]) {
      await until(async () => (await http('GET', `${server.url}/readyz`)).status === 200, 'readiness to recover');
    }
  }, 30_000);
});
