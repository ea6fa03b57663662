import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Server } from 'socket.io';
import type { Socket as ServerSocket } from 'socket.io';
import { createLogger } from '@app/common/logging/logger';
import type { Feature } from '@app/common/protocol/chat';
import { FEATURES } from '@app/common/protocol/chat';
import type {
  AnnounceAck,
  AssignAck,
  DeviceToServerEvents,
  EmbedAssignPayload,
  ServerToDeviceEvents,
} from '@app/common/protocol/device-protocol';
import { decodeVector, doneSchema, embeddingSchema, taskErrorSchema } from '@app/common/protocol/device-protocol';
import type { EmbedParams } from '@app/common/protocol/embeddings';
import { DeviceAgent } from './agent';
import type { Backend, EmbedResult, EmbedTask } from './backends/backend';
import { cancelledError } from './backends/backend';
import { simEmbedding } from './backends/sim-embedding';
import { SimBackend } from './backends/sim.backend';
import { EMBEDDING_EVENT_BYTES } from './task/embedding-events';

/**
 * The agent's side of embedding tasks, against a stand-in dispatcher: a socket.io server on the
 * loopback interface that assigns tasks and records what the agent sends.
 */

interface Received {
  event: string;
  payload: Record<string, unknown>;
}

async function until(predicate: () => boolean, what: string, timeoutMs = 5_000): Promise<void> {
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

/** A backend whose embed the test scripts; it serves `m` and declares what it is given. */
function scripted(features: Feature[], embed: (task: EmbedTask, signal: AbortSignal) => Promise<EmbedResult>): Backend {
  return {
    name: 'scripted',
    features,
    models: () => ['m'],
    identities: () => [],
    available: () => true,
    start: async () => undefined,
    stop: () => undefined,
    run: () => Promise.reject(new Error('no chat here')),
    embed,
  };
}

async function harness(backend: Backend) {
  const http = createServer();
  const io = new Server<DeviceToServerEvents, ServerToDeviceEvents>(http, { transports: ['websocket'] });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const received: Received[] = [];
  const sockets: ServerSocket<DeviceToServerEvents, ServerToDeviceEvents>[] = [];
  io.of('/devices').on('connection', (socket: ServerSocket<DeviceToServerEvents, ServerToDeviceEvents>) => {
    sockets.push(socket);
    socket.on('announce', (payload, ack) => {
      const answer: AnnounceAck = {
        ok: true,
        device_id: 'dev-1',
        pool: 'network',
        models: payload.models,
        refused: [],
      };
      ack(answer);
    });
    for (const event of ['task:delta', 'task:embedding', 'task:done', 'task:error'] as const) {
      socket.on(event, (payload: object) => received.push({ event, payload: { ...payload } }));
    }
  });
  const agent = new DeviceAgent({
    servers: [`http://127.0.0.1:${(http.address() as AddressInfo).port}`],
    token: `syd_${'a'.repeat(40)}`,
    backend,
    logger: createLogger('agent-embed-test', 'silent'),
    logContent: false,
    onExit: () => undefined,
  });
  cleanups.push(async () => {
    agent.shutdown('SIGTERM');
    agent.shutdown('SIGTERM');
    await io.close();
  });
  agent.start();
  await until(() => sockets.length === 1, 'the agent’s connection');
  return {
    agent,
    received,
    socket: () => sockets[0],
    assign(embed: EmbedParams, model = 'm'): Promise<{ address: string; ack: AssignAck }> {
      const address = `network:${randomUUID()}`;
      const payload: EmbedAssignPayload = { task_address: address, model, attempt: 1, kind: 'embed', embed };
      return sockets[0]
        .timeout(5_000)
        .emitWithAck('task:assign', payload)
        .then((ack) => ({ address, ack }));
    },
    eventsOf: (address: string) => received.filter((r) => r.payload.task_address === address),
    ended: (address: string) =>
      received.some((r) => r.payload.task_address === address && r.event !== 'task:embedding'),
  };
}

void describe('DeviceAgent: embedding tasks', () => {
  void it('sends the vectors in events under the cap, every input once, seq in order, then done', async () => {
    const sim = new SimBackend({
      models: ['m'],
      ttftMs: 0,
      tokensPerSecond: 0,
      tokens: 8,
      features: [...FEATURES],
      embeddingDimensions: 1024,
    });
    const h = await harness(sim);
    const input = Array.from({ length: 300 }, (_, i) => `input number ${i}`);
    const { address, ack } = await h.assign({ input });
    expect(ack).toEqual({ accepted: true });
    await until(() => h.ended(address), 'the end of the task');

    const events = h.eventsOf(address);
    expect(events.map((e) => e.payload.seq)).toEqual(events.map((_, i) => i));
    const embeddings = events.slice(0, -1);
    expect(embeddings.length).toBeGreaterThan(1);
    for (const e of embeddings) {
      expect(e.event).toBe('task:embedding');
      expect(embeddingSchema.safeParse(e.payload).success).toBe(true);
      expect(Buffer.byteLength(JSON.stringify(e.payload))).toBeLessThanOrEqual(EMBEDDING_EVENT_BYTES);
    }
    const data = embeddings.flatMap((e) => e.payload.data as { index: number; embedding: string }[]);
    expect(data.map((d) => d.index)).toEqual(input.map((_, i) => i));
    // The runtime's float32 values, bit for bit.
    data.forEach((d) => expect(decodeVector(d.embedding)).toEqual(simEmbedding(input[d.index], 1024)));

    const done = events.at(-1)!;
    expect(done.event).toBe('task:done');
    expect(doneSchema.safeParse(done.payload).success).toBe(true);
    expect(done.payload).toMatchObject({
      finish_reasons: [],
      usage: { prompt_tokens: 900, completion_tokens: 0, total_tokens: 900 },
    });
  });

  void it('ends with usage null when the runtime gave no count', async () => {
    const h = await harness(
      scripted(['embeddings'], async () => ({ vectors: [Float32Array.of(0.6, 0.8)], promptTokens: null })),
    );
    const { address } = await h.assign({ input: ['x'] });
    await until(() => h.ended(address), 'the end of the task');
    expect(h.eventsOf(address).map((e) => [e.event, e.payload.seq])).toEqual([
      ['task:embedding', 0],
      ['task:done', 1],
    ]);
    expect(h.eventsOf(address)[1].payload).toMatchObject({ finish_reasons: [], usage: null });
  });

  void it('refuses an embedding task it did not declare the features for', async () => {
    const h = await harness(scripted(['embeddings'], () => Promise.reject(new Error('not called'))));
    expect((await h.assign({ input: [[1, 2]] })).ack).toEqual({ accepted: false, reason: 'unsupported_feature' });
    expect((await h.assign({ input: ['x'], dimensions: 8 })).ack).toEqual({
      accepted: false,
      reason: 'unsupported_feature',
    });
    const chatOnly = await harness(scripted(['tools'], () => Promise.reject(new Error('not called'))));
    expect((await chatOnly.assign({ input: ['x'] })).ack).toEqual({ accepted: false, reason: 'unsupported_feature' });
  });

  void it('stops the runtime’s work on cancel, and sends nothing for the task', async () => {
    let aborted = false;
    const h = await harness(
      scripted(
        ['embeddings'],
        (_task, signal) =>
          new Promise((_resolve, reject) =>
            signal.addEventListener('abort', () => {
              aborted = true;
              reject(cancelledError());
            }),
          ),
      ),
    );
    const { address } = await h.assign({ input: ['x'] });
    h.socket().emit('task:cancel', { task_address: address });
    await until(() => aborted, 'the backend’s abort');
    // socket.io keeps order: the agent handled the cancel before this assignment, and is free.
    expect((await h.assign({ input: ['y'] })).ack).toEqual({ accepted: true });
    expect(h.eventsOf(address)).toEqual([]);
  });

  void it('stops between two events when the task ends meanwhile (a second signal here)', async () => {
    // 64 vectors of 16,384 dimensions (the longest): two to an event.
    const vectors = Array.from({ length: 64 }, (_, i) => new Float32Array(16_384).fill(i / 64));
    const stop: { agent?: DeviceAgent } = {};
    const h = await harness(
      scripted(['embeddings'], async () => {
        // Runs before the agent's turn after its first event: the device is told to stop at once.
        setImmediate(() => {
          stop.agent?.shutdown('SIGTERM');
          stop.agent?.shutdown('SIGTERM');
        });
        return { vectors, promptTokens: 64 };
      }),
    );
    stop.agent = h.agent;
    const { address } = await h.assign({ input: vectors.map((_, i) => `input ${i}`) });
    await until(() => h.ended(address), 'the end of the task');
    const events = h.eventsOf(address);
    expect(events.map((e) => [e.event, e.payload.seq])).toEqual([
      ['task:embedding', 0],
      ['task:error', 1],
    ]);
    expect(taskErrorSchema.safeParse(events[1].payload).success).toBe(true);
    expect(events[1].payload.code).toBe('device_shutdown');
  });

  void it('fails the task when the backend gives a vector per input too few', async () => {
    const h = await harness(scripted(['embeddings'], async () => ({ vectors: [Float32Array.of(1)], promptTokens: 2 })));
    const { address } = await h.assign({ input: ['a', 'b'] });
    await until(() => h.ended(address), 'the end of the task');
    expect(h.eventsOf(address)).toEqual([
      {
        event: 'task:error',
        payload: expect.objectContaining({
          seq: 0,
          code: 'backend_error',
          message: expect.stringMatching(/1 vectors for 2 inputs/),
        }),
      },
    ]);
  });
});
