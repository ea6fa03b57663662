import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { endpoint, readLines, send } from '../../../apps/device/src/backends/upstream/http-client';
import { httpError, parseErrorBody } from '../../../apps/device/src/backends/upstream/runtime-errors';

const servers: Server[] = [];
afterAll(() => servers.forEach((s) => s.close()));

async function serve(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<URL> {
  const server = createServer(handler);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
}

async function until(predicate: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !predicate(); i++) {
    await new Promise((r) => setTimeout(r, 5));
  }
  // condition not reached in time
  expect(predicate()).toBe(true);
}

const request = (url: URL, signal = new AbortController().signal) =>
  send({ method: 'POST', url, body: { a: 1 }, signal, connectTimeoutMs: 2_000 });

void describe('upstream HTTP client', () => {
  void it('reads a streamed body line by line, across chunk boundaries and multi-byte characters', async () => {
    const url = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      const text = Buffer.from('{"a":"é"}\r\n{"b":2}\n\n{"c":3}', 'utf8');
      // Split inside the two-byte é.
      res.write(text.subarray(0, 7));
      setTimeout(() => res.end(text.subarray(7)), 10);
    });
    const signal = new AbortController().signal;
    const res = await request(url, signal);
    const lines: string[] = [];
    for await (const line of readLines(res, url, signal)) {
      lines.push(line);
    }
    expect(lines).toEqual(['{"a":"é"}', '{"b":2}', '', '{"c":3}']);
  });

  void it('closes the connection at once when aborted, before or after the headers', async () => {
    const seen = { received: 0, closed: 0 };
    const url = await serve((req, res) => {
      seen.received++;
      req.socket.on('close', () => seen.closed++);
      if (req.url === '/streaming') {
        res.writeHead(200);
        res.write('{"first":true}\n');
      }
    });
    // While the runtime is still silent (prompt evaluation).
    const before = new AbortController();
    const pending = request(url, before.signal);
    await until(() => seen.received === 1);
    before.abort();
    await expect(pending).rejects.toMatchObject({ code: 'cancelled' });
    await until(() => seen.closed === 1);

    // Mid-stream.
    const during = new AbortController();
    const streaming = new URL('/streaming', url);
    const res = await request(streaming, during.signal);
    const lines = readLines(res, streaming, during.signal);
    expect(await lines.next()).toEqual({ done: false, value: '{"first":true}' });
    during.abort();
    await expect(lines.next()).rejects.toMatchObject({ code: 'cancelled' });
    await until(() => seen.closed === 2);
  });

  void it('reports a refused connection as upstream_unreachable', async () => {
    const url = await serve(() => undefined);
    servers.pop()!.close();
    await new Promise((r) => setTimeout(r, 20));
    await expect(request(url)).rejects.toMatchObject({ code: 'upstream_unreachable' });
  });

  void it('sends the API key as a bearer token', async () => {
    let auth: string | undefined;
    const url = await serve((req, res) => {
      auth = req.headers.authorization;
      res.end('{}');
    });
    const res = await send({
      method: 'GET',
      url,
      apiKey: 'k-123',
      signal: new AbortController().signal,
      connectTimeoutMs: 1000,
    });
    res.resume();
    expect(auth).toBe('Bearer k-123');
  });

  void it('reads the error bodies of Ollama, OpenAI, old vLLM, FastAPI and plain text', () => {
    expect(parseErrorBody('{"error":"model \'x\' not found"}')).toEqual({ message: "model 'x' not found" });
    expect(parseErrorBody('{"error":{"message":"m","type":"t","param":null,"code":"c"}}')).toEqual({
      message: 'm',
      code: 'c',
      type: 't',
    });
    expect(parseErrorBody('{"object":"error","message":"m","type":"BadRequestError","code":400}')).toEqual({
      message: 'm',
      code: '400',
      type: 'BadRequestError',
    });
    expect(parseErrorBody('{"detail":"Not Found"}')).toEqual({ message: 'Not Found' });
    expect(parseErrorBody('Bad Gateway\n')).toEqual({ message: 'Bad Gateway' });
  });

  void it('classifies HTTP errors into task error codes', () => {
    const code = (status: number, message: string, extra: { code?: string; type?: string } = {}) =>
      httpError(status, { message, ...extra }).code;
    expect(code(404, "model 'llama3:70b' not found")).toBe('model_not_found');
    expect(code(404, 'The model `x` does not exist.')).toBe('model_not_found');
    expect(code(400, "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.")).toBe(
      'context_length_exceeded',
    );
    expect(code(400, 'the request exceeds the available context size, try increasing it')).toBe(
      'context_length_exceeded',
    );
    expect(code(400, 'x', { type: 'exceed_context_size_error' })).toBe('context_length_exceeded');
    expect(code(400, 'x', { code: 'context_length_exceeded' })).toBe('context_length_exceeded');
    expect(code(400, 'Input prompt (5000 tokens) is too long and exceeds limit of 4096')).toBe(
      'context_length_exceeded',
    );
    expect(code(500, 'input is too large to process. increase the physical batch size')).toBe(
      'context_length_exceeded',
    );
    expect(code(400, '"gemma2:2b" does not support tools')).toBe('unsupported_by_model');
    expect(code(401, 'invalid api key')).toBe('upstream_unauthorized');
    expect(code(429, 'slow down')).toBe('upstream_busy');
    expect(code(500, 'CUDA error')).toBe('upstream_error');
    expect(code(503, 'Loading model')).toBe('upstream_error');
    expect(httpError(502, { message: 'bad gateway' }).message).toMatch(/HTTP 502/);
    expect(code(400, 'invalid temperature')).toBe('upstream_bad_request');
  });

  void it('appends endpoint paths to the base path', () => {
    expect(endpoint(new URL('http://h:8000/v1'), '/models').href).toBe('http://h:8000/v1/models');
    expect(endpoint(new URL('http://h:8000/v1/'), '/models').href).toBe('http://h:8000/v1/models');
    expect(endpoint(new URL('http://h:11434'), '/api/chat').href).toBe('http://h:11434/api/chat');
  });
});
