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
  AnnouncePayload,
  AssignAck,
  ChatAssignPayload,
  DeviceToServerEvents,
  EmbedAssignPayload,
  ServerToDeviceEvents,
} from '@app/common/protocol/device-protocol';
import { decodeVector, doneSchema, embeddingSchema, taskErrorSchema } from '@app/common/protocol/device-protocol';
import type { EmbedParams } from '@app/common/protocol/embeddings';
import { DeviceAgent } from './agent';
import type { Backend, BackendResult, BackendTask, DeltaSink, EmbedResult, EmbedTask } from './backends/backend';
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

/** A backend whose embed (and chat, if given) the test scripts; it serves `m` and declares what it is given. */
function scripted(
  features: Feature[],
  embed: (task: EmbedTask, signal: AbortSignal) => Promise<EmbedResult>,
  run: (task: BackendTask, sink: DeltaSink, signal: AbortSignal) => Promise<BackendResult> = () =>
    Promise.reject(new Error('no chat here')),
): Backend {
  return {
    name: 'scripted',
    features,
    models: () => ['m'],
    identities: () => [],
    available: () => true,
    start: async () => undefined,
    stop: () => undefined,
    run,
    embed,
  };
}

async function harness(backend: Backend) {
  const http = createServer();
  const io = new Server<DeviceToServerEvents, ServerToDeviceEvents>(http, { transports: ['websocket'] });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const received: Received[] = [];
  const announces: AnnouncePayload[] = [];
  const exits: number[] = [];
  const sockets: ServerSocket<DeviceToServerEvents, ServerToDeviceEvents>[] = [];
  io.of('/devices').on('connection', (socket: ServerSocket<DeviceToServerEvents, ServerToDeviceEvents>) => {
    sockets.push(socket);
    socket.on('announce', (payload, ack) => {
      announces.push(payload);
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
    onExit: (code) => exits.push(code),
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
    announces,
    exits,
    sockets,
    socket: () => sockets[0],
    assign(embed: EmbedParams, model = 'm'): Promise<{ address: string; ack: AssignAck }> {
      const address = `network:${randomUUID()}`;
      const payload: EmbedAssignPayload = { task_address: address, model, attempt: 1, kind: 'embed', embed };
      return sockets[0]
        .timeout(5_000)
        .emitWithAck('task:assign', payload)
        .then((ack) => ({ address, ack }));
    },
    assignChat(): Promise<{ address: string; ack: AssignAck }> {
      const address = `network:${randomUUID()}`;
      const payload: ChatAssignPayload = {
        task_address: address,
        model: 'm',
        attempt: 1,
        params: { messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 },
      };
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

/** An embedding call of the scripted backend that the test answers when it likes. */
interface PendingEmbed {
  inputs: readonly unknown[];
  signal: AbortSignal;
  answer: () => void;
}

/** A backend that holds every embedding call until the test answers it: one vector of 2 values per input. */
function held(features: Feature[] = ['embeddings']) {
  const calls: PendingEmbed[] = [];
  const backend = scripted(
    features,
    (task, signal) =>
      new Promise<EmbedResult>((resolve, reject) => {
        signal.addEventListener('abort', () => reject(cancelledError()));
        const vectors = task.params.input.map((_, i) => Float32Array.of(i, 1));
        calls.push({ inputs: task.params.input, signal, answer: () => resolve({ vectors, promptTokens: 1 }) });
      }),
    async (_task, sink) => {
      sink.delta([{ index: 0, content: 'hello' }]);
      return { finish_reasons: ['stop'], usage: null };
    },
  );
  return { backend, calls };
}

void describe('DeviceAgent: two embedding tasks at once (embed_prefetch)', () => {
  void it('announces embed_prefetch with embeddings, and not without', async () => {
    const h = await harness(held().backend);
    await until(() => h.announces.length > 0, 'the announce');
    expect(h.announces[0].features).toEqual(['embeddings', 'embed_prefetch']);
    const chat = await harness(held(['tools']).backend);
    await until(() => chat.announces.length > 0, 'the announce');
    expect(chat.announces[0].features).toEqual(['tools']);
  });

  void it('calls the runtime for the second task before the first one’s vectors are sent, and ends each on its own', async () => {
    const { backend, calls } = held();
    const h = await harness(backend);
    const first = await h.assign({ input: ['a', 'b'] });
    const second = await h.assign({ input: ['c'] });
    expect([first.ack, second.ack]).toEqual([{ accepted: true }, { accepted: true }]);
    // Both runtime calls are under way, and nothing of either task was sent yet.
    expect(calls.map((c) => c.inputs)).toEqual([['a', 'b'], ['c']]);
    expect(h.received).toEqual([]);

    calls[0].answer();
    await until(() => h.ended(first.address), 'the end of the first task');
    expect(h.eventsOf(second.address)).toEqual([]);
    expect(calls[1].signal.aborted).toBe(false);
    calls[1].answer();
    await until(() => h.ended(second.address), 'the end of the second task');

    for (const { address, inputs } of [
      { address: first.address, inputs: 2 },
      { address: second.address, inputs: 1 },
    ]) {
      const events = h.eventsOf(address);
      expect(events.map((e) => [e.event, e.payload.seq])).toEqual([
        ['task:embedding', 0],
        ['task:done', 1],
      ]);
      expect((events[0].payload.data as unknown[]).length).toBe(inputs);
    }
    // Free again: a chat task is taken.
    expect((await h.assignChat()).ack).toEqual({ accepted: true });
  });

  void it('ends the tasks in whatever order their runtime calls answer', async () => {
    const { backend, calls } = held();
    const h = await harness(backend);
    const first = await h.assign({ input: ['a'] });
    const second = await h.assign({ input: ['b'] });
    calls[1].answer();
    await until(() => h.ended(second.address), 'the end of the second task');
    // One task held: room for one more embedding task beside it, as the second was.
    const third = await h.assign({ input: ['c'] });
    expect(third.ack).toEqual({ accepted: true });
    calls[0].answer();
    calls[2].answer();
    await until(() => h.ended(first.address) && h.ended(third.address), 'the end of the others');
    for (const address of [first.address, second.address, third.address]) {
      expect(h.eventsOf(address).map((e) => e.payload.seq)).toEqual([0, 1]);
    }
  });

  void it('stops only the task a cancel names', async () => {
    const { backend, calls } = held();
    const h = await harness(backend);
    const first = await h.assign({ input: ['a'] });
    const second = await h.assign({ input: ['b'] });
    h.socket().emit('task:cancel', { task_address: first.address });
    await until(() => calls[0].signal.aborted, 'the first task’s abort');
    expect(calls[1].signal.aborted).toBe(false);
    calls[1].answer();
    await until(() => h.ended(second.address), 'the end of the second task');
    expect(h.eventsOf(first.address)).toEqual([]);
    expect(h.eventsOf(second.address).map((e) => e.event)).toEqual(['task:embedding', 'task:done']);
  });

  void it('refuses a third task, and a chat task beside an embedding task or an embedding task beside a chat task', async () => {
    const { backend, calls } = held();
    const h = await harness(backend);
    const first = await h.assign({ input: ['a'] });
    expect((await h.assignChat()).ack).toEqual({ accepted: false, reason: 'busy' });
    await h.assign({ input: ['b'] });
    expect((await h.assign({ input: ['c'] })).ack).toEqual({ accepted: false, reason: 'busy' });
    expect((await h.assignChat()).ack).toEqual({ accepted: false, reason: 'busy' });
    expect(calls).toHaveLength(2);
    calls[0].answer();
    calls[1].answer();
    await until(() => h.received.filter((r) => r.event === 'task:done').length === 2, 'both ends');
    expect(h.ended(first.address)).toBe(true);

    // A chat task, alone as before: nothing beside it.
    let finish: (result: BackendResult) => void = () => undefined;
    const chat = await harness(
      scripted(
        ['embeddings'],
        () => Promise.reject(new Error('not called')),
        () => new Promise<BackendResult>((resolve) => (finish = resolve)),
      ),
    );
    const talk = await chat.assignChat();
    expect(talk.ack).toEqual({ accepted: true });
    expect((await chat.assign({ input: ['a'] })).ack).toEqual({ accepted: false, reason: 'busy' });
    expect((await chat.assignChat()).ack).toEqual({ accepted: false, reason: 'busy' });
    finish({ finish_reasons: ['stop'], usage: null });
    await until(() => chat.ended(talk.address), 'the end of the chat task');
  });

  void it('runs a chat task while idle as before', async () => {
    const h = await harness(held().backend);
    const { address, ack } = await h.assignChat();
    expect(ack).toEqual({ accepted: true });
    await until(() => h.ended(address), 'the end of the chat task');
    expect(h.eventsOf(address).map((e) => [e.event, e.payload.seq])).toEqual([
      ['task:delta', 0],
      ['task:done', 1],
    ]);
  });

  void it('ends both on a disconnect, and sends nothing more for either', async () => {
    const { backend, calls } = held();
    const h = await harness(backend);
    const first = await h.assign({ input: ['a'] });
    const second = await h.assign({ input: ['b'] });
    h.socket().disconnect(true);
    await until(() => calls.every((c) => c.signal.aborted), 'both aborts');
    await until(() => h.sockets.length === 2 && h.announces.length === 2, 'the reconnect');
    expect(h.announces[1].running_task).toBeNull();
    expect(h.eventsOf(first.address)).toEqual([]);
    expect(h.eventsOf(second.address)).toEqual([]);
  });

  void it('on a first signal finishes both, naming the older as running_task, then exits', async () => {
    const { backend, calls } = held();
    const h = await harness(backend);
    const first = await h.assign({ input: ['a'] });
    const second = await h.assign({ input: ['b'] });
    h.agent.shutdown('SIGTERM');
    await until(() => h.announces.length === 2, 'the draining announce');
    expect(h.announces[1]).toMatchObject({ available: false, running_task: first.address });
    expect((await h.assign({ input: ['c'] })).ack).toEqual({ accepted: false, reason: 'shutting_down' });
    calls[0].answer();
    await until(() => h.ended(first.address), 'the end of the first task');
    expect(h.exits).toEqual([]);
    calls[1].answer();
    await until(() => h.exits.length > 0, 'the exit');
    expect(h.exits).toEqual([0]);
    expect(h.eventsOf(second.address).map((e) => e.event)).toEqual(['task:embedding', 'task:done']);
  });

  void it('on a second signal ends both with device_shutdown', async () => {
    const { backend, calls } = held();
    const h = await harness(backend);
    const first = await h.assign({ input: ['a'] });
    const second = await h.assign({ input: ['b'] });
    h.agent.shutdown('SIGTERM');
    h.agent.shutdown('SIGTERM');
    await until(() => h.ended(first.address) && h.ended(second.address), 'both ends');
    for (const address of [first.address, second.address]) {
      expect(h.eventsOf(address)).toEqual([
        { event: 'task:error', payload: expect.objectContaining({ seq: 0, code: 'device_shutdown' }) },
      ]);
    }
    expect(calls.every((c) => c.signal.aborted)).toBe(true);
  });
});
