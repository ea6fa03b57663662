import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Server } from 'socket.io';
import type { Socket as ServerSocket } from 'socket.io';
import { createLogger } from '@app/common/logging/logger';
import { FEATURES } from '@app/common/protocol/chat';
import type {
  AnnouncePayload,
  AssignAck,
  AssignPayload,
  DeviceToServerEvents,
  ServerToDeviceEvents,
} from '@app/common/protocol/device-protocol';
import { DeviceAgent } from '../../../apps/device/src/agent';
import { SimBackend } from '../../../apps/device/src/backends';
import type { BackendResult, BackendTask, DeltaSink } from '../../../apps/device/src/backends/backend';

/**
 * An agent given several dispatcher URLs: when the one it is connected to dies, it stops the task it
 * was running for it and is serving from another within moments, keeping its identity (its token).
 */
type DeviceServerSocket = ServerSocket<DeviceToServerEvents, ServerToDeviceEvents>;
const TOKEN = `syd_${'b'.repeat(40)}`;

async function until(predicate: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!predicate()) {
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** A stand-in dispatcher: a real socket.io server that records announces and task events per connection. */
async function standIn(port = 0) {
  const http = createServer();
  const io = new Server<DeviceToServerEvents, ServerToDeviceEvents>(http, { transports: ['websocket'] });
  await new Promise<void>((resolve) => http.listen(port, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
  const announces: AnnouncePayload[] = [];
  const events: { event: string; payload: { task_address: string } }[] = [];
  const tokens: unknown[] = [];
  const sockets: DeviceServerSocket[] = [];
  const nsp = io.of('/devices');
  nsp.use((socket, next) => {
    tokens.push((socket.handshake.auth as { token?: string }).token);
    next();
  });
  nsp.on('connection', (socket: DeviceServerSocket) => {
    sockets.push(socket);
    socket.on('announce', (payload, ack) => {
      announces.push(payload);
      ack({ ok: true, device_id: 'dev-1', pool: 'network', models: payload.models, refused: [] });
    });
    for (const event of ['task:delta', 'task:done', 'task:error'] as const) {
      socket.on(event, (payload: { task_address: string }) => events.push({ event, payload }));
    }
  });
  return {
    url,
    announces,
    events,
    tokens,
    connected: () => sockets.some((s) => s.connected),
    /** Assigns a task on the live connection; `hang` makes the backend run it until it is aborted. */
    assign(content = 'hello'): Promise<{ address: string; ack: AssignAck }> {
      const address = `network:${randomUUID()}`;
      const payload: AssignPayload = {
        task_address: address,
        model: 'sim-model',
        attempt: 1,
        params: { messages: [{ role: 'user', content }], max_tokens: 64 },
      };
      const socket = sockets.filter((s) => s.connected).at(-1)!;
      return socket
        .timeout(5_000)
        .emitWithAck('task:assign', payload)
        .then((ack) => ({ address, ack }));
    },
    /** As a SIGKILL looks from the device: the TCP connections drop with no goodbye, and nothing listens any more. */
    async kill() {
      for (const socket of sockets) {
        socket.conn.close();
      }
      await io.close();
    },
  };
}

/** A backend whose task runs until it is aborted, and which says whether it was. */
class HangingBackend extends SimBackend {
  aborted: string[] = [];
  constructor() {
    super({ models: ['sim-model'], ttftMs: 0, tokensPerSecond: 0, tokens: 4, features: [...FEATURES] });
  }
  override async run(task: BackendTask, sink: DeltaSink, signal: AbortSignal): Promise<BackendResult> {
    if (task.params.messages[0]?.content !== 'hang') {
      return super.run(task, sink, signal);
    }
    sink.delta([{ index: 0, content: 'first' }]);
    return new Promise((_, reject) =>
      signal.addEventListener('abort', () => {
        this.aborted.push(task.model);
        reject(Object.assign(new Error('aborted'), { name: 'AbortError' }));
      }),
    );
  }
}

describe('device agent with several dispatchers', () => {
  const cleanups: (() => Promise<void> | void)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) {
      await cleanup();
    }
  });

  function agentFor(servers: string[], backend = new HangingBackend()) {
    let exitCode: number | null = null;
    const agent = new DeviceAgent({
      servers,
      token: TOKEN,
      backend,
      logger: createLogger('device-test', (process.env.AGENT_TEST_LOG as 'info') ?? 'silent'),
      logContent: false,
      onExit: (code) => (exitCode = code),
    });
    cleanups.push(() => {
      agent.shutdown('SIGTERM');
      agent.shutdown('SIGTERM');
    });
    agent.start();
    return { agent, backend, exitCode: () => exitCode };
  }

  it('moves to the next dispatcher when its own dies mid-task, stops that task upstream, and serves there', async () => {
    const [a, b] = [await standIn(), await standIn()];
    cleanups.push(
      () => a.kill(),
      () => b.kill(),
    );
    const { backend } = agentFor([a.url, b.url]);
    await until(() => a.announces.length > 0, 'the announce to the first dispatcher');
    expect(b.tokens).toEqual([]);

    // The running task: a device whose dispatcher died must not keep generating for nobody.
    const hanging = await a.assign('hang');
    expect(hanging.ack).toEqual({ accepted: true });
    await until(() => a.events.some((e) => e.event === 'task:delta'), 'the first delta of the task');

    await a.kill();
    await until(() => b.announces.length > 0, 'the announce to the second dispatcher');
    expect(backend.aborted).toEqual(['sim-model']);
    expect(b.tokens).toEqual([TOKEN]);
    expect(b.announces[0]).toMatchObject({ available: true, running_task: null, models: ['sim-model'] });
    // Nothing of the task that belonged to the dead dispatcher reaches the new one.
    const served = await b.assign();
    expect(served.ack).toEqual({ accepted: true });
    await until(() => b.events.some((e) => e.event === 'task:done'), 'the task on the second dispatcher');
    expect(new Set(b.events.map((e) => e.payload.task_address))).toEqual(new Set([served.address]));
  });

  it('keeps trying every dispatcher while none answers, and connects to the first that comes back', async () => {
    const [a, b] = [await standIn(), await standIn()];
    cleanups.push(() => b.kill());
    const { exitCode } = agentFor([a.url, b.url]);
    await until(() => a.announces.length > 0, 'the announce to the first dispatcher');
    await a.kill();
    await b.kill();
    // Both gone: the agent neither gives up nor exits.
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(exitCode()).toBeNull();
    const c = await standIn(Number(new URL(b.url).port));
    cleanups.push(() => c.kill());
    await until(() => c.announces.length > 0, 'the announce to the dispatcher that came back', 20_000);
    expect(c.tokens.at(-1)).toBe(TOKEN);
  });
});
