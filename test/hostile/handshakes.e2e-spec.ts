import { readFileSync } from 'node:fs';
import { io } from 'socket.io-client';
import type { Socket } from 'socket.io-client';
import { PROTOCOL_VERSION, randomBase62 } from '@app/common';
import {
  closeDb,
  createDevice,
  db,
  http,
  sleep,
  startDevice,
  startDispatcher,
  uniq,
  waitOnline,
  within,
} from '../support/stack';
import type { Dispatcher, Proc } from '../support/stack';
import { RedisServer, loopbackAddress, metricValue } from '../reliability/helpers';
import { announcePayload, until } from './helpers';

/** The default of DEVICE_HANDSHAKE_FAILURES, which this suite runs with. */
const FAILURES_PER_MINUTE = 30;
/** DEVICE_MAX_INVALID_EVENTS's default. */
const MAX_INVALID_EVENTS = 20;
/** The first cooling-off of this suite's dispatchers (DEVICE_COOLING_OFF_MS; 10 s by default): short, so that a test can wait one out. */
const COOLING_OFF_MS = 3_000;
/** ANNOUNCE_LIMITS.burst. */
const ANNOUNCE_BURST = 10;

/** What a handshake came to: the connected socket, or the refusal's message and the wait it asks for. */
type Outcome = { socket: Socket } | { message: string; retryAfterMs: number | null };

function refusal(outcome: Outcome): { message: string; retryAfterMs: number | null } {
  if (!('message' in outcome)) {
    throw new Error('the handshake was accepted');
  }
  return outcome;
}

/**
 * Hostile devices at the handshake and just after it, written on socket.io-client: wrong tokens by
 * the thousand, binary attachments, reconnects after being struck out, announce floods; and the real
 * agent told to cool off. What is asserted is what the other parties see: refusals and the waits they
 * state, what Postgres and the dispatcher had to read, whether the device gets back in.
 *
 * Two dispatchers on a redis-server of the suite's own: a cooling-off must hold on a dispatcher other
 * than the one that imposed it, and failure counts of this suite must not meet those of others.
 */
describe('hostile handshakes', () => {
  let redis: RedisServer;
  let a: Dispatcher;
  let b: Dispatcher;
  const sockets: Socket[] = [];
  const procs: Proc[] = [];

  beforeAll(async () => {
    redis = await RedisServer.start();
    const env = { REDIS_URL: redis.url, DEVICE_COOLING_OFF_MS: String(COOLING_OFF_MS) };
    [a, b] = await Promise.all([startDispatcher(env), startDispatcher(env)]);
  });

  afterAll(async () => {
    sockets.forEach((s) => s.disconnect());
    await Promise.all(procs.map((p) => p.stop('SIGKILL')));
    await Promise.all([a, b].filter(Boolean).map((d) => d.proc.stop('SIGTERM', 3_000)));
    await redis?.stop();
    await closeDb();
  });

  /** A device socket, from `localAddress` when given (a loopback address of the test's choosing). */
  function open(server: string, auth: unknown, localAddress?: string): Socket {
    const socket = io(`${server}/devices`, {
      transports: ['websocket'],
      auth: auth as Record<string, unknown>,
      reconnection: false,
      forceNew: true,
      ...(localAddress ? { localAddress } : {}),
    });
    sockets.push(socket);
    return socket;
  }

  function handshake(server: string, token: string, localAddress?: string): Promise<Outcome> {
    const socket = open(server, { token, protocol: PROTOCOL_VERSION }, localAddress);
    return new Promise((resolve) => {
      socket.once('connect', () => resolve({ socket }));
      socket.once('connect_error', (err: Error & { data?: { retry_after_ms?: number } }) => {
        socket.close();
        resolve({ message: err.message, retryAfterMs: err.data?.retry_after_ms ?? null });
      });
    });
  }

  async function connected(server: string, token: string): Promise<Socket> {
    const outcome = await handshake(server, token);
    if (!('socket' in outcome)) {
      throw new Error(`refused: ${JSON.stringify(outcome)}`);
    }
    return outcome.socket;
  }

  const gone = (socket: Socket) => new Promise<string>((resolve) => socket.once('disconnect', resolve));

  /** Sends DEVICE_MAX_INVALID_EVENTS invalid events; resolves with the reason of the disconnect that follows. */
  async function strikeOut(socket: Socket): Promise<string> {
    const disconnected = gone(socket);
    for (let i = 0; i < MAX_INVALID_EVENTS; i++) {
      socket.emit('no:such:event', i);
    }
    return disconnected;
  }

  const metric = async (dispatcher: Dispatcher, name: string, labels: Record<string, string>) =>
    metricValue((await http('GET', `${dispatcher.url}/metrics`)).text, name, labels) || 0;

  /** Every scan of the devices table Postgres has counted (sequential and index). */
  async function deviceScans(): Promise<number> {
    const [row] = await db().$queryRawUnsafe<{ n: bigint }[]>(
      `SELECT (coalesce(seq_scan, 0) + coalesce(idx_scan, 0))::bigint AS n FROM pg_stat_user_tables WHERE relname = 'devices'`,
    );
    return Number(row.n);
  }

  it('a storm of wrong tokens: over the limit its address is refused before any lookup, and Postgres sees no query per token', async () => {
    const from = loopbackAddress();
    const spare = await createDevice();
    const waves = 200;
    const perWave = 25;
    const before = await deviceScans();
    const started = performance.now();
    const messages = new Map<string, number>();
    const waits: number[] = [];
    for (let wave = 0; wave < waves; wave++) {
      const outcomes = await Promise.all(
        Array.from({ length: perWave }, () => handshake(a.url, `syd_${randomBase62(40)}`, from)),
      );
      for (const outcome of outcomes.map(refusal)) {
        const code = outcome.message.split(':')[0];
        messages.set(code, (messages.get(code) ?? 0) + 1);
        if (outcome.retryAfterMs !== null) {
          waits.push(outcome.retryAfterMs);
        }
      }
    }
    // Once over the limit, even the right token from that address is refused: it is not looked at.
    const right = await handshake(a.url, spare.token, from);
    // Postgres counts a backend's scans in pg_stat_user_tables within PGSTAT_IDLE_INTERVAL (10 s).
    await sleep(11_000);
    const scans = (await deviceScans()) - before;
    const seconds = (performance.now() - started) / 1000;
    // Another address is not concerned.
    (await connected(a.url, spare.token)).disconnect();

    process.stdout.write(
      `hostile: ${waves * perWave} wrong tokens from ${from}: ${JSON.stringify(Object.fromEntries(messages))}; ` +
        `${scans} scans of the devices table in ${seconds.toFixed(1)} s\n`,
    );
    expect(messages.get('invalid_device_token')).toBe(FAILURES_PER_MINUTE);
    expect(messages.get('too_many_failed_handshakes')).toBe(waves * perWave - FAILURES_PER_MINUTE);
    // Every wait stated is within the minute.
    expect(waits.filter((ms) => !(ms > 0 && ms <= 60_000))).toEqual([]);
    expect(refusal(right).message).toMatch(/^too_many_failed_handshakes: retry after \d+ ms$/);
    // What two dispatchers do whatever the storm (each looks for revoked devices once a second), one
    // refresh of the known tokens a second at most, and a little for the start and the right token:
    // nothing that grows with the number of wrong tokens (5,000 here; before, a lookup per wave).
    const bound = 3 * Math.ceil(seconds + 10) + 10;
    expect(scans).toBeLessThanOrEqual(bound);
  });

  it('binary attachments are refused: the device is struck out at the first, and the dispatcher reads a bounded number of bytes', async () => {
    const { token } = await createDevice();
    const pid = a.proc.child.pid!;
    const bytesRead = () => Number(/rchar: (\d+)/.exec(readFileSync(`/proc/${pid}/io`, 'utf8'))![1]);
    const binaryBefore = await metric(a, 'switchyard_device_invalid_events_total', { reason: 'binary' });
    const readBefore = bytesRead();
    // For 2.5 s (less than the first cooling-off), as fast as the socket takes them: announces (valid,
    // so unpunished before) each carrying nine attachments just under DEVICE_MAX_EVENT_BYTES,
    // reconnecting whenever dropped.
    const attachment = Buffer.alloc(250_000, 7);
    const attachments = Array.from({ length: 9 }, () => attachment);
    const stats = { connects: 0, sent: 0, disconnects: [] as string[], refusals: [] as string[] };
    /** The connections' ends (their underlying WebSocket closed): the dispatcher reads nothing more from them. */
    const closed: Promise<unknown>[] = [];
    const deadline = Date.now() + 2_500;
    while (Date.now() < deadline) {
      const outcome = await handshake(a.url, token);
      if (!('socket' in outcome)) {
        stats.refusals.push(outcome.message);
        await sleep(50);
        continue;
      }
      stats.connects++;
      const socket = outcome.socket;
      closed.push(new Promise((resolve) => socket.io.engine.once('close', resolve)));
      let reason: string | null = null;
      void gone(socket).then((r) => (reason = r));
      while (reason === null && Date.now() < deadline) {
        if (socket.io.engine.writeBuffer.length < 8) {
          socket.emit('announce', announcePayload([]), ...attachments);
          stats.sent += attachments.length * attachment.length;
        }
        await new Promise((resolve) => setImmediate(resolve));
      }
      if (reason !== null) {
        stats.disconnects.push(reason);
      }
      socket.disconnect();
    }
    await within(Promise.all(closed), 10_000, 'the connections to close');
    const read = bytesRead() - readBefore;
    const binary = (await metric(a, 'switchyard_device_invalid_events_total', { reason: 'binary' })) - binaryBefore;
    process.stdout.write(
      `hostile: binary flood for 2.5 s: ${stats.connects} connection(s), ${(stats.sent / 1e6).toFixed(1)} MB handed to ` +
        `socket.io, dispatcher read ${(read / 1e6).toFixed(1)} MB; disconnects ${JSON.stringify(stats.disconnects)}, ` +
        `${stats.refusals.length} refusals (${[...new Set(stats.refusals.map((m) => m.split(':')[0]))].join(', ')})\n`,
    );
    expect(stats.connects).toBe(1);
    expect(stats.disconnects).toEqual(['io server disconnect']);
    expect(stats.refusals.length).toBeGreaterThan(0);
    expect(stats.refusals.filter((m) => !m.startsWith('cooling_off:'))).toEqual([]);
    expect(binary).toBe(1);
    // One event's worth at most (nine attachments, 2.25 MB), whatever the device tried to send.
    expect(read).toBeLessThan(16e6);
  });

  it('a device struck out is refused while it cools off, on every dispatcher, and the wait doubles on repeat', async () => {
    const { id, token } = await createDevice();
    expect(await strikeOut(await connected(a.url, token))).toBe('io server disconnect');

    // A reconnect storm, to both dispatchers: every handshake refused, saying how long to wait.
    const outcomes: Outcome[] = [];
    for (let i = 0; i < 60; i++) {
      outcomes.push(await handshake(i % 2 ? b.url : a.url, token));
    }
    const refusals = outcomes.map(refusal);
    expect(refusals.filter((r) => !/^cooling_off: retry after \d+ ms$/.test(r.message))).toEqual([]);
    const waits = refusals.map((r) => r.retryAfterMs!);
    expect(waits.filter((ms) => !(ms > 0 && ms <= COOLING_OFF_MS))).toEqual([]);

    // Once the wait is over the device is let in again (on the other dispatcher); struck out again, it
    // waits twice as long.
    await sleep(Math.max(...waits) + 100);
    expect(await strikeOut(await connected(b.url, token))).toBe('io server disconnect');
    const again = refusal(await handshake(a.url, token));
    expect(again.message).toMatch(/^cooling_off: /);
    expect(again.retryAfterMs).toBeGreaterThan(COOLING_OFF_MS);
    // As the dispatchers logged them (a line is logged once Redis answered, and reaches the test through
    // a pipe: it may come after the refusal that its cooling-off caused).
    const cooled = () =>
      `${a.proc.output}${b.proc.output}`
        .split('\n')
        .filter((line) => line.includes(`"deviceId":"${id}"`) && line.includes('device cooling off'))
        .map((line) => JSON.parse(line) as { ms: number; repeat: number })
        .map(({ ms, repeat }) => [ms, repeat]);
    const logged = await until(async () => (cooled().length >= 2 ? cooled() : null), 'both cooling-offs logged');
    expect(logged).toEqual([
      [COOLING_OFF_MS, 1],
      [2 * COOLING_OFF_MS, 2],
    ]);
  });

  it('an announce storm: announces over the rate are refused in their ack and struck, until the device is disconnected', async () => {
    const { token } = await createDevice();
    const socket = await connected(a.url, token);
    const strikesBefore = await metric(a, 'switchyard_device_invalid_events_total', { reason: 'announce_rate' });
    const disconnected = gone(socket);
    const acks = await Promise.all(
      Array.from({ length: 40 }, () =>
        socket
          .timeout(5_000)
          .emitWithAck('announce', announcePayload([]))
          .catch(() => null),
      ),
    );
    const reason = await within(disconnected, 10_000, 'the disconnect').catch((err: Error) => err.message);
    const accepted = acks.filter((ack) => ack?.ok === true).length;
    const refused = acks.filter((ack) => ack?.ok === false);
    const strikes =
      (await metric(a, 'switchyard_device_invalid_events_total', { reason: 'announce_rate' })) - strikesBefore;
    process.stdout.write(
      `hostile: 40 announces at once: ${accepted} accepted, ${refused.length} refused, ${strikes} struck\n`,
    );
    expect(reason).toBe('io server disconnect');
    // The burst, and what the rate gave back meanwhile.
    expect(accepted).toBeGreaterThanOrEqual(1);
    expect(accepted).toBeLessThanOrEqual(ANNOUNCE_BURST + 1);
    expect(refused.length).toBeGreaterThanOrEqual(10);
    expect(new Set(refused.map((ack) => ack.error))).toEqual(
      new Set(['too many announces: at most 10 at once and 2 a second']),
    );
    // Every announce over the rate, those processed after the one that disconnected it included.
    expect(strikes).toBeGreaterThanOrEqual(MAX_INVALID_EVENTS);
    expect(strikes).toBeLessThanOrEqual(40 - accepted);
    expect(refusal(await handshake(b.url, token)).message).toMatch(/^cooling_off: /);
  });

  it('the real agent told to cool off waits as long as it is told, then connects again', async () => {
    const model = uniq('cooled');
    const device = await createDevice();
    const agent = await startDevice(a, device.token, { models: [model] }, { redisUrl: redis.url });
    procs.push(agent);
    const refusalsBefore = await metric(a, 'switchyard_handshake_refusals_total', { reason: 'cooling_off' });

    // A hostile device with the agent's token takes its place (the agent is dropped) and gets struck out.
    const hostile = await connected(a.url, device.token);
    expect(await strikeOut(hostile)).toBe('io server disconnect');
    const struckAt = performance.now();

    await until(
      async () => /dispatcher asks this device to wait before connecting again/.test(agent.output),
      'the agent to be told to wait',
      15_000,
    );
    const told = Number(/"retry_in_ms":(\d+)/.exec(agent.output)![1]);
    await waitOnline([model], device.token, { redisUrl: redis.url, timeoutMs: 30_000, proc: agent });
    const back = performance.now() - struckAt;
    const refusals =
      (await metric(a, 'switchyard_handshake_refusals_total', { reason: 'cooling_off' })) - refusalsBefore;
    process.stdout.write(
      `hostile: the agent was told to wait ${told} ms, was back ${back.toFixed(0)} ms after the strike-out, ` +
        `refused ${refusals} time(s) meanwhile\n`,
    );
    expect(told).toBeGreaterThan(0);
    expect(told).toBeLessThanOrEqual(COOLING_OFF_MS + 1_000);
    // It waited, and did not try again meanwhile: refused once, not once per step of its backoff.
    expect(refusals).toBe(1);
    // Not at once (before, it was back within a second): no sooner than the cooling-off allows.
    expect(back).toBeGreaterThanOrEqual(COOLING_OFF_MS / 2);
    expect(agent.child.exitCode).toBeNull();
    expect(agent.output).not.toMatch(/device token refused/);
  });
});
