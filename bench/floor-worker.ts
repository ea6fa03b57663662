import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Redis } from 'ioredis';
import { Server } from 'socket.io';
import type { Socket as ServerSocket } from 'socket.io';
import { io as connect } from 'socket.io-client';

/**
 * The floor of Switchyard's design on this machine: the same processes and hops as the relay, with
 * nothing else. `node floor-worker.js <role> <redis url> <arg>`, roles:
 *
 * - `api` (arg unused): an HTTP server; a request's body goes on a Redis list with an announcement
 *   (LPUSH + PUBLISH, one write), and the answer is read from the request's Redis stream with a
 *   blocking XREAD and written to the client as it comes (SSE);
 * - `dispatcher` (arg `held` or none): socket.io server for the devices; told of a job (SUBSCRIBE),
 *   takes it atomically (RPOP, one round trip, as BullMQ's moveToActive is one) and emits it to an idle
 *   device; each line a device sends goes to the request's stream (XADD), or with `held` all of an
 *   answer's lines go in its one ending entry, as the relay does for a client that did not ask to stream;
 * - `devices` (arg `<dispatcher url> <upstream url> <count>`): devices that send each job to the
 *   upstream over a kept-alive connection and emit each SSE data line of its answer as it arrives;
 *   with `sim:<n>` for the upstream they answer at once with n content chunks, as the sim backend
 *   with no generation time does.
 *
 * No authentication, validation, task state, records, fairness, limits or metrics: what a relay with
 * these processes and these hops cannot do without. Each process reports its port over IPC.
 */
const [role, redisUrl, ...args] = process.argv.slice(2);
const JOBS = 'floor:jobs';
const QUEUE = 'floor:queue';
const stream = (id: string) => `floor:s:${id}`;
const listening = (server: http.Server) =>
  server.listen(0, '127.0.0.1', () => process.send?.({ port: (server.address() as AddressInfo).port }));

function api(): void {
  const commands = new Redis(redisUrl);
  const readers: Redis[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const id = randomUUID();
      void commands.lpush(QUEUE, `${id} ${Buffer.concat(chunks).toString()}`);
      void commands.publish(JOBS, id);
      void follow(id, res);
    });
  });
  async function follow(id: string, res: http.ServerResponse): Promise<void> {
    const reader = readers.pop() ?? new Redis(redisUrl);
    let last = '0';
    try {
      for (;;) {
        const read = await reader.xread('BLOCK', 10_000, 'STREAMS', stream(id), last);
        for (const [, entries] of read ?? []) {
          for (const [entryId, [kind, line]] of entries) {
            last = entryId;
            if (!res.headersSent) {
              res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
            }
            if (kind === 'end') {
              res.end(line ? `${line}\n\n` : undefined);
              return;
            }
            res.write(`${line}\n\n`);
          }
        }
      }
    } finally {
      readers.push(reader);
      void commands.unlink(stream(id));
    }
  }
  listening(server);
}

function dispatcher(): void {
  const hold = args[0] === 'held';
  const commands = new Redis(redisUrl);
  const sub = new Redis(redisUrl);
  const idle: ServerSocket[] = [];
  const server = http.createServer();
  const io = new Server(server, { transports: ['websocket'] });
  const assign = async () => {
    const device = idle.shift();
    if (!device) {
      return;
    }
    const job = await commands.rpop(QUEUE);
    if (!job) {
      idle.unshift(device);
      return;
    }
    const space = job.indexOf(' ');
    device.emit('assign', job.slice(0, space), job.slice(space + 1));
  };
  const held = new Map<string, string[]>();
  io.on('connection', (device) => {
    idle.push(device);
    device.on('line', (id: string, line: string) => {
      if (!hold) {
        void commands.xadd(stream(id), '*', 'd', line);
      } else if (held.has(id)) {
        held.get(id)?.push(line);
      } else {
        held.set(id, [line]);
      }
    });
    device.on('done', (id: string) => {
      void commands.xadd(stream(id), '*', 'end', held.get(id)?.join('\n\n') ?? '');
      held.delete(id);
      idle.push(device);
      void assign();
    });
  });
  void sub.subscribe(JOBS);
  sub.on('message', () => void assign());
  listening(server);
}

function devices(): void {
  const [server, upstream, count] = args;
  const answer = upstream.startsWith('sim:') ? simAnswer(Number(upstream.slice(4))) : upstreamAnswer(new URL(upstream));
  let connected = 0;
  for (let i = 0; i < Number(count); i++) {
    const socket = connect(server, { transports: ['websocket'] });
    socket.on('connect', () => {
      if (++connected === Number(count)) {
        process.send?.({ port: 0 });
      }
    });
    socket.on('assign', (id: string, body: string) =>
      answer(id, body, (line) => {
        socket.emit('line', id, line);
        if (line === 'data: [DONE]') {
          socket.emit('done', id);
        }
      }),
    );
  }
}

/** A device's work: each SSE data line of a job's answer, in order, to `emit`, ending with `data: [DONE]`. */
type Answer = (id: string, body: string, emit: (line: string) => void) => void;

/** Sends each job to the upstream over a kept-alive connection and emits its data lines as they arrive. */
function upstreamAnswer(target: URL): Answer {
  const agent = new http.Agent({ keepAlive: true });
  return (_id, body, emit) => {
    const req = http.request(target, {
      method: 'POST',
      agent,
      headers: { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) },
    });
    req.on('response', (res) => {
      res.setEncoding('utf8');
      let buffer = '';
      res.on('data', (chunk: string) => {
        buffer += chunk;
        let end: number;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const line = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          if (line.startsWith('data: ')) {
            emit(line);
          }
        }
      });
    });
    req.end(body);
  };
}

/** Answers at once with `tokens` content chunks, as the sim backend with no generation time does. */
function simAnswer(tokens: number): Answer {
  return (id, _body, emit) => {
    for (let t = 0; t < tokens; t++) {
      emit(simChunk(id, t));
    }
    emit('data: [DONE]');
  };
}

/** One content chunk of an OpenAI stream, as an SSE data line. */
function simChunk(id: string, index: number): string {
  const chunk = {
    id: `chatcmpl-${id}`,
    object: 'chat.completion.chunk',
    created: Math.floor(Date.now() / 1000),
    model: 'sim',
    choices: [{ index: 0, delta: { content: `tok${index} ` }, finish_reason: null }],
  };
  return `data: ${JSON.stringify(chunk)}`;
}

if (role === 'api') {
  api();
} else if (role === 'dispatcher') {
  dispatcher();
} else if (role === 'devices') {
  devices();
}
process.on('disconnect', () => process.exit(0));
