import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Server } from 'socket.io';
import type { Socket as ServerSocket } from 'socket.io';
import { createLogger } from '@app/common/logging/logger';
import type { ChatParams } from '@app/common/protocol/chat';
import type { Feature } from '@app/common/protocol/chat';
import { FEATURES } from '@app/common/protocol/chat';
import type {
  AnnounceAck,
  AnnouncePayload,
  AssignAck,
  AssignPayload,
  DeviceToServerEvents,
  ModelIdentity,
  ServerToDeviceEvents,
} from '@app/common/protocol/device-protocol';
import {
  PROTOCOL_VERSION,
  announceSchema,
  deltaSchema,
  doneSchema,
  taskErrorSchema,
} from '@app/common/protocol/device-protocol';
import { backoffDelay, DeviceAgent, TOKEN_REFUSED } from '../../../apps/device/src/agent';
import type { Backend, BackendResult, EmbedResult, SimOptions } from '../../../apps/device/src/backends';
import { BackendError, SimBackend, simDigest } from '../../../apps/device/src/backends';

// A stand-in dispatcher: a real socket.io server on the /devices namespace that records what the agent sends.
const GOOD_TOKEN = `syd_${'a'.repeat(40)}`;

interface Received {
  socketId: string;
  event: string;
  payload: Record<string, unknown>;
}

type DeviceServerSocket = ServerSocket<DeviceToServerEvents, ServerToDeviceEvents>;

async function until(predicate: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!predicate()) {
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) {
    await cleanup();
  }
});

/** The stand-in dispatcher's answer to an announce: by default, every model accepted. */
type AnnounceAnswer = (payload: AnnouncePayload) => unknown;
const acceptAll: AnnounceAnswer = (payload) => ({
  ok: true,
  device_id: 'dev-1',
  pool: 'network',
  models: payload.models,
  refused: [],
});

async function harness(
  sim: Partial<SimOptions> = {},
  token = GOOD_TOKEN,
  custom?: Backend,
  announceAnswer: AnnounceAnswer = acceptAll,
) {
  const http = createServer();
  const io = new Server<DeviceToServerEvents, ServerToDeviceEvents>(http, { transports: ['websocket'] });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const port = (http.address() as AddressInfo).port;
  const received: Received[] = [];
  const auths: unknown[] = [];
  const sockets: DeviceServerSocket[] = [];
  const nsp = io.of('/devices');
  nsp.use((socket, next) => {
    auths.push(socket.handshake.auth);
    next((socket.handshake.auth as { token?: string }).token === GOOD_TOKEN ? undefined : new Error(TOKEN_REFUSED));
  });
  nsp.on('connection', (socket: DeviceServerSocket) => {
    sockets.push(socket);
    socket.on('announce', (payload, ack) => {
      received.push({ socketId: socket.id, event: 'announce', payload: { ...payload } });
      ack(announceAnswer(payload) as AnnounceAck);
    });
    for (const event of ['task:delta', 'task:done', 'task:error'] as const) {
      socket.on(event, (payload: object) => received.push({ socketId: socket.id, event, payload: { ...payload } }));
    }
  });

  const backend =
    custom ??
    new SimBackend({
      models: ['sim-model'],
      ttftMs: 0,
      tokensPerSecond: 0,
      tokens: 8,
      features: [...FEATURES],
      ...sim,
    });
  let exitCode: number | null = null;
  const agent = new DeviceAgent({
    servers: [`http://127.0.0.1:${port}`],
    token,
    backend,
    logger: createLogger('device-test', (process.env.AGENT_TEST_LOG as 'info') ?? 'silent'),
    logContent: false,
    onExit: (code) => {
      exitCode = code;
    },
  });
  cleanups.push(async () => {
    agent.shutdown('SIGTERM');
    agent.shutdown('SIGTERM');
    await io.close();
  });
  agent.start();

  const current = () => sockets.at(-1)!;
  return {
    agent,
    received,
    auths,
    sockets,
    exitCode: () => exitCode,
    current,
    /** Assigns a task on the latest connection and resolves with the agent's answer. */
    assign(params: Partial<ChatParams> = {}, model = 'sim-model'): Promise<{ address: string; ack: AssignAck }> {
      const address = `network:${randomUUID()}`;
      const payload: AssignPayload = {
        task_address: address,
        model,
        attempt: 1,
        params: { messages: [{ role: 'user', content: 'hello there' }], max_tokens: 512, ...params },
      };
      return current()
        .timeout(5_000)
        .emitWithAck('task:assign', payload)
        .then((ack) => ({ address, ack }));
    },
    eventsOf(address: string) {
      return received.filter((r) => r.payload.task_address === address);
    },
  };
}

/** A runtime whose availability and models the test switches, as the upstream monitor would. */
class SwitchableBackend implements Backend {
  readonly name = 'switchable';
  features: Feature[] = ['tools'];
  up = true;
  served = ['sim-model'];
  private onChange: () => void = () => undefined;

  models(): string[] {
    return [...this.served];
  }
  identities(): ModelIdentity[] {
    return [];
  }
  available(): boolean {
    return this.up;
  }
  async start(onChange: () => void): Promise<void> {
    this.onChange = onChange;
  }
  stop(): void {}
  /** It does not declare `embeddings`: never asked to embed. */
  embed(): Promise<EmbedResult> {
    return Promise.reject(new BackendError('backend_error', 'this runtime does not embed'));
  }
  async run(): Promise<BackendResult> {
    return { finish_reasons: ['stop'], usage: null };
  }
  change(update: Partial<Pick<SwitchableBackend, 'up' | 'served' | 'features'>>): void {
    Object.assign(this, update);
    this.onChange();
  }
}

void describe('DeviceAgent', () => {
  void it('connects with its token and protocol version and announces what it serves', async () => {
    const h = await harness({ features: ['tools', 'n'] });
    await until(() => h.received.some((r) => r.event === 'announce'), 'announce');
    expect(h.auths[0]).toEqual({ token: GOOD_TOKEN, protocol: PROTOCOL_VERSION });
    const announce = h.received.find((r) => r.event === 'announce')!.payload;
    expect(announceSchema.safeParse(announce).success).toBe(true);
    expect(announce).toEqual({
      agent_version: announce.agent_version,
      backend: 'sim',
      models: ['sim-model'],
      features: ['tools', 'n'],
      available: true,
      running_task: null,
      identities: [
        {
          model: 'sim-model',
          digest: simDigest('sim-model'),
          family: 'sim',
          parameter_size: null,
          quantization: null,
          root: null,
          context_length: null,
        },
      ],
    });
    expect(simDigest('sim-model')).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(simDigest('sim-model')).not.toBe(simDigest('sim-model-2'));
  });

  void it('runs a task: accepted, deltas with seq from 0, then done', async () => {
    const h = await harness();
    await until(() => h.sockets.length === 1, 'connection');
    const { address, ack } = await h.assign({ n: 2 });
    expect(ack).toEqual({ accepted: true });
    await until(() => h.eventsOf(address).some((r) => r.event === 'task:done'), 'task:done');
    const events = h.eventsOf(address);
    expect(events.map((e) => e.payload.seq)).toEqual(events.map((_, i) => i));
    expect(events.at(-1)!.event).toBe('task:done');
    for (const e of events.slice(0, -1)) {
      expect(e.event).toBe('task:delta');
      expect(deltaSchema.safeParse(e.payload).success).toBe(true);
    }
    const done = events.at(-1)!.payload;
    expect(doneSchema.safeParse(done).success).toBe(true);
    expect(done.finish_reasons).toEqual(['stop', 'stop']);
    expect((done.usage as { completion_tokens: number }).completion_tokens).toBe(16);
  });

  void it('refuses a second task while busy, and unknown models and missing features', async () => {
    const h = await harness({ tokensPerSecond: 20, tokens: 1000, features: ['n'] });
    await until(() => h.sockets.length === 1, 'connection');
    expect((await h.assign({ max_tokens: 2000 })).ack).toEqual({ accepted: true });
    expect((await h.assign()).ack).toEqual({ accepted: false, reason: 'busy' });
  });

  void it('refuses models it does not serve and features it did not announce', async () => {
    const h = await harness({ features: ['n'] });
    await until(() => h.sockets.length === 1, 'connection');
    expect((await h.assign({}, 'other-model')).ack).toEqual({ accepted: false, reason: 'model_not_served' });
    const tools: ChatParams['tools'] = [{ type: 'function', function: { name: 'f' } }];
    expect((await h.assign({ tools })).ack).toEqual({ accepted: false, reason: 'unsupported_feature' });
    expect((await h.assign({ max_tokens: 0 })).ack).toEqual({ accepted: false, reason: 'invalid_assignment' });
  });

  void it('on cancel stops the task, sends nothing more for it, and takes the next task at once', async () => {
    const h = await harness({ tokensPerSecond: 50, tokens: 1000 });
    await until(() => h.sockets.length === 1, 'connection');
    const first = await h.assign({ max_tokens: 2000 });
    await until(() => h.eventsOf(first.address).length >= 2, 'first deltas');
    h.current().emit('task:cancel', { task_address: first.address });
    // The agent handles the cancel before this assignment (socket.io keeps order), so it must accept it.
    const second = await h.assign({ max_tokens: 3 });
    expect(second.ack).toEqual({ accepted: true });
    const countAtAck = h.eventsOf(first.address).length;
    await until(() => h.eventsOf(second.address).some((r) => r.event === 'task:done'), 'second task:done');
    expect(h.eventsOf(first.address)).toHaveLength(countAtAck);
    expect(h.eventsOf(first.address).every((r) => r.event === 'task:delta')).toBe(true);
  });

  void it('drops what it cannot read from the dispatcher, logs it, and keeps serving', async () => {
    const h = await harness({ tokensPerSecond: 50, tokens: 1000 });
    await until(() => h.sockets.length === 1, 'connection');
    const task = await h.assign({ max_tokens: 2000 });
    await until(() => h.eventsOf(task.address).length >= 1, 'first delta');
    const emit = h.current().emit.bind(h.current()) as (event: string, ...args: unknown[]) => boolean;
    // Cancels it cannot read do not stop its task; an event the protocol does not have changes nothing.
    emit('task:cancel', { task_address: 'not an address' });
    emit('task:cancel', null);
    emit('no:such:event', { task_address: task.address });
    // An assignment without an acknowledgement is not taken, however valid.
    const params = { messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 };
    emit('task:assign', { task_address: `network:${randomUUID()}`, model: 'sim-model', attempt: 1, params });
    // socket.io keeps order: this answer comes after the agent handled everything above.
    expect((await h.assign()).ack).toEqual({ accepted: false, reason: 'busy' });
    const sent = h.eventsOf(task.address).length;
    await until(() => h.eventsOf(task.address).length > sent, 'more output of the running task');
    h.current().emit('task:cancel', { task_address: task.address });
    expect((await h.assign({ max_tokens: 2 })).ack).toEqual({ accepted: true });
    expect(h.sockets).toHaveLength(1);
  });

  void it('does not trust an announce acknowledgement it cannot read', async () => {
    // `ok: true` without the models: read blindly, `refused.length` would throw in the agent.
    const h = await harness({}, GOOD_TOKEN, undefined, () => ({ ok: true, device_id: 'dev-1' }));
    await until(() => h.received.some((r) => r.event === 'announce'), 'announce');
    const { address, ack } = await h.assign();
    expect(ack).toEqual({ accepted: true });
    await until(() => h.eventsOf(address).some((r) => r.event === 'task:done'), 'task:done');
    expect(h.sockets).toHaveLength(1);
  });

  for (const how of ['transport close', 'server disconnect'] as const) {
    void it(`drops the running task on ${how}, reconnects and never replays its events`, async () => {
      const h = await harness({ tokensPerSecond: 50, tokens: 1000 });
      await until(() => h.sockets.length === 1, 'connection');
      const task = await h.assign({ max_tokens: 2000 });
      await until(() => h.eventsOf(task.address).length >= 2, 'deltas');
      const old = h.current();
      if (how === 'transport close') {
        old.conn.close();
      } else {
        old.disconnect(true);
      }
      await until(
        () => h.sockets.length === 2 && h.received.filter((r) => r.event === 'announce').length === 2,
        'reconnect',
      );
      const reannounce = h.received.filter((r) => r.event === 'announce')[1].payload;
      expect(reannounce.running_task).toBeNull();
      expect(reannounce.available).toBe(true);
      // Free for a new task on the new connection, and nothing of the old task arrives there.
      const next = await h.assign({ max_tokens: 2 });
      expect(next.ack).toEqual({ accepted: true });
      await until(() => h.eventsOf(next.address).some((r) => r.event === 'task:done'), 'task:done');
      expect(h.eventsOf(task.address).every((r) => r.socketId === old.id)).toBe(true);
      expect(h.eventsOf(task.address).some((r) => r.event !== 'task:delta')).toBe(false);
    });
  }

  void it('announces what its backend reports as it changes, and refuses tasks while the runtime is down', async () => {
    const backend = new SwitchableBackend();
    const h = await harness({}, GOOD_TOKEN, backend);
    const announces = () => h.received.filter((r) => r.event === 'announce').map((r) => r.payload);
    await until(() => announces().length === 1, 'announce');
    expect(announces()[0].available).toBe(true);

    backend.change({ up: false });
    await until(() => announces().length === 2, 'unavailable announce');
    expect(announces()[1].available).toBe(false);
    expect((await h.assign()).ack).toEqual({ accepted: false, reason: 'upstream_unavailable' });

    backend.change({ up: true, served: ['sim-model', 'pulled'], features: ['tools', 'logprobs'] });
    await until(() => announces().length === 3, 'available announce');
    expect({
      available: announces()[2].available,
      models: announces()[2].models,
      features: announces()[2].features,
    }).toEqual({ available: true, models: ['sim-model', 'pulled'], features: ['tools', 'logprobs'] });
    const { address, ack } = await h.assign({}, 'pulled');
    expect(ack).toEqual({ accepted: true });
    await until(() => h.eventsOf(address).some((r) => r.event === 'task:done'), 'task:done');
  });

  void it('exits 1 when the dispatcher refuses its token', async () => {
    const h = await harness({}, `syd_${'b'.repeat(40)}`);
    await until(() => h.exitCode() !== null, 'exit');
    expect(h.exitCode()).toBe(1);
    expect(h.sockets).toHaveLength(0);
  });

  void it('on the first signal announces unavailable, finishes its task, then exits 0', async () => {
    const h = await harness({ tokensPerSecond: 200, tokens: 40 });
    await until(() => h.sockets.length === 1, 'connection');
    const task = await h.assign();
    await until(() => h.eventsOf(task.address).length >= 1, 'first delta');
    h.agent.shutdown('SIGTERM');
    await until(() => h.received.filter((r) => r.event === 'announce').length === 2, 'second announce');
    expect(h.received.filter((r) => r.event === 'announce')[1].payload.available).toBe(false);
    expect((await h.assign()).ack).toEqual({ accepted: false, reason: 'shutting_down' });
    await until(() => h.exitCode() !== null, 'exit');
    expect(h.exitCode()).toBe(0);
    const events = h.eventsOf(task.address);
    expect(events.at(-1)!.event).toBe('task:done');
    expect(events).toHaveLength(41);
  });

  void it('on the second signal ends its task with device_shutdown and exits 0', async () => {
    const h = await harness({ tokensPerSecond: 50, tokens: 1000 });
    await until(() => h.sockets.length === 1, 'connection');
    const task = await h.assign({ max_tokens: 2000 });
    await until(() => h.eventsOf(task.address).length >= 1, 'first delta');
    h.agent.shutdown('SIGINT');
    h.agent.shutdown('SIGINT');
    await until(() => h.exitCode() !== null, 'exit');
    expect(h.exitCode()).toBe(0);
    await until(() => h.eventsOf(task.address).some((r) => r.event === 'task:error'), 'task:error');
    const last = h.eventsOf(task.address).at(-1)!;
    expect(last.event).toBe('task:error');
    expect(last.payload.code).toBe('device_shutdown');
    expect(taskErrorSchema.safeParse(last.payload).success).toBe(true);
  });

  void it('backs off exponentially with jitter, capped at 10 s', () => {
    expect(backoffDelay(0, () => 0.5)).toBe(500);
    expect(backoffDelay(1, () => 0.5)).toBe(1000);
    expect(backoffDelay(0, () => 0)).toBe(250);
    expect(backoffDelay(0, () => 1)).toBe(750);
    expect(backoffDelay(50, () => 1)).toBe(10_000);
    expect(backoffDelay(50, () => 0)).toBe(5_000);
  });
});
