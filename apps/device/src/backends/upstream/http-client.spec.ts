import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { finished, postJson, readLines, send } from './http-client';

/** A local SSE server that counts the connections it accepted and says when one closes. */
function sseServer(handler: (res: http.ServerResponse, connection: number) => void) {
  const sockets: Socket[] = [];
  const closed: number[] = [];
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => handler(res, sockets.indexOf(req.socket)));
  });
  server.on('connection', (socket: Socket) => {
    const n = sockets.push(socket) - 1;
    socket.on('close', () => closed.push(n));
  });
  return {
    sockets,
    closed,
    start: () => new Promise<URL>((resolve) => server.listen(0, '127.0.0.1', () => resolve(url(server)))),
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function url(server: http.Server): URL {
  return new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/chat/completions`);
}

const until = async (check: () => boolean) => {
  while (!check()) {
    await new Promise((r) => setTimeout(r, 5));
  }
};

async function stream(target: URL, signal: AbortSignal, stopAt?: string): Promise<string[]> {
  const res = await send({ method: 'POST', url: target, body: { stream: true }, signal, connectTimeoutMs: 1_000 });
  const lines: string[] = [];
  for await (const line of readLines(res, target, signal)) {
    if (line === '') {
      continue;
    }
    lines.push(line);
    if (line === 'data: [DONE]') {
      finished(res);
      break;
    }
    if (line === stopAt) {
      break;
    }
  }
  // As an agent's next task comes: after this one's answer went back (its connection is free by then).
  await until(() => res.readableEnded || res.destroyed);
  await new Promise((r) => setImmediate(r));
  return lines;
}

describe('the agent HTTP client', () => {
  it('sends the next request on the connection of the last finished one', async () => {
    const server = sseServer((res) => res.end('data: one\n\ndata: [DONE]\n\n'));
    const target = await server.start();
    try {
      for (let i = 0; i < 3; i++) {
        const controller = new AbortController();
        expect(await stream(target, controller.signal)).toStrictEqual(['data: one', 'data: [DONE]']);
        // Every task's signal is aborted when it ends: that must not cut a pooled connection.
        controller.abort();
      }
      expect(server.sockets).toHaveLength(1);
      expect(server.closed).toStrictEqual([]);
    } finally {
      await server.stop();
    }
  });

  it('closes the connection of an answer left before its end, so that the runtime stops', async () => {
    const server = sseServer((res) => {
      res.write('data: one\n\n');
      res.write('data: stop here\n\n');
      // The rest never comes: the runtime is still generating.
    });
    const target = await server.start();
    try {
      const controller = new AbortController();
      expect(await stream(target, controller.signal, 'data: stop here')).toStrictEqual([
        'data: one',
        'data: stop here',
      ]);
      await until(() => server.closed.includes(0));
    } finally {
      await server.stop();
    }
  });

  it('closes the connection when the task is cancelled mid-answer', async () => {
    const server = sseServer((res) => res.write('data: one\n\n'));
    const target = await server.start();
    try {
      const controller = new AbortController();
      const res = await send({
        method: 'POST',
        url: target,
        body: {},
        signal: controller.signal,
        connectTimeoutMs: 1_000,
      });
      const reading = (async () => {
        for await (const line of readLines(res, target, controller.signal)) {
          if (line === 'data: one') {
            controller.abort();
          }
        }
      })();
      await expect(reading).rejects.toMatchObject({ code: 'cancelled' });
      await until(() => server.closed.includes(0));
    } finally {
      await server.stop();
    }
  });

  it('sends a request again on a new connection when the runtime closed the pooled one meanwhile', async () => {
    const server = sseServer((res) => res.end('data: [DONE]\n\n'));
    const target = await server.start();
    try {
      expect(await stream(target, new AbortController().signal)).toStrictEqual(['data: [DONE]']);
      // The runtime drops the idle connection without the client having noticed yet.
      server.sockets[0].resetAndDestroy();
      expect(await stream(target, new AbortController().signal)).toStrictEqual(['data: [DONE]']);
      expect(server.sockets).toHaveLength(2);
    } finally {
      await server.stop();
    }
  });

  it('reads a whole JSON answer and leaves its connection to the next request', async () => {
    const server = sseServer((res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":[1,2]}'));
    const target = await server.start();
    try {
      const options = { signal: new AbortController().signal, connectTimeoutMs: 1_000 };
      expect(await postJson(target, { input: ['a'] }, options)).toStrictEqual({ ok: [1, 2] });
      await new Promise((r) => setImmediate(r));
      expect(await postJson(target, { input: ['b'] }, options)).toStrictEqual({ ok: [1, 2] });
      expect(server.sockets).toHaveLength(1);
    } finally {
      await server.stop();
    }
  });

  it('refuses a JSON answer over its limit, or one that is not JSON, and closes the connection of the first', async () => {
    const server = sseServer((res, connection) =>
      res.end(connection === 0 ? JSON.stringify({ embeddings: [new Array(1000).fill(0.5)] }) : '<html>'),
    );
    const target = await server.start();
    try {
      const options = { signal: new AbortController().signal, connectTimeoutMs: 1_000 };
      await expect(postJson(target, {}, options, 1_000)).rejects.toMatchObject({
        code: 'upstream_bad_response',
        message: expect.stringContaining('more than 1000 bytes'),
      });
      await until(() => server.closed.includes(0));
      await expect(postJson(target, {}, options)).rejects.toMatchObject({
        code: 'upstream_bad_response',
        message: expect.stringContaining('did not answer with JSON'),
      });
    } finally {
      await server.stop();
    }
  });
});
