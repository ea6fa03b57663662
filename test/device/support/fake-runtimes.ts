import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { freePort, sleep } from '../../support/stack';

/**
 * Fake local runtimes for the device agent's end-to-end tests: real HTTP servers that speak Ollama's
 * and OpenAI's wire formats (NDJSON and SSE framing, final lines, usage, error bodies) and record
 * every request they receive, including when the agent closed its connection.
 */

/** One request as the fake received it. */
export interface Recorded {
  method: string;
  path: string;
  headers: IncomingMessage['headers'];
  body: any;
  receivedAt: number;
  /** When the connection closed (Date.now()), whoever closed it. */
  closedAt: number | null;
  /** Whether the fake had written its whole answer before the connection closed. */
  completed: boolean;
}

/** Answers one chat request; `rec` is its record. */
export type ChatHandler = (ctx: {
  req: IncomingMessage;
  res: ServerResponse;
  body: any;
  rec: Recorded;
}) => Promise<void>;

abstract class FakeRuntime {
  readonly requests: Recorded[] = [];
  port = 0;
  private server: Server | null = null;
  private readonly sockets = new Set<Socket>();
  /** Handlers by upstream model name; `*` for any other. */
  readonly handlers = new Map<string, ChatHandler>();

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** Listens on `port` (a free one at first; the same one again after stop). */
  async start(port?: number): Promise<this> {
    this.port = port ?? this.port ?? 0;
    if (this.port === 0) {
      this.port = await freePort();
    }
    const server = createServer((req, res) => void this.dispatch(req, res));
    server.on('connection', (socket) => {
      this.sockets.add(socket);
      socket.on('close', () => this.sockets.delete(socket));
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', resolve);
    });
    this.port = (server.address() as AddressInfo).port;
    this.server = server;
    return this;
  }

  /** Stops listening and drops every connection: the runtime is gone (connections are refused). */
  async stop(): Promise<void> {
    const server = this.server;
    this.server = null;
    for (const socket of this.sockets) {
      socket.destroy();
    }
    if (server) {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  }

  /** Chat requests (not probes) received so far. */
  chats(): Recorded[] {
    return this.requests.filter((r) => r.method === 'POST');
  }

  lastChat(): Recorded {
    const last = this.chats().at(-1);
    if (!last) {
      throw new Error('no chat request received');
    }
    return last;
  }

  /** Waits until `n` chat requests arrived. */
  async waitChats(n: number, timeoutMs = 10_000): Promise<Recorded> {
    const deadline = Date.now() + timeoutMs;
    while (this.chats().length < n) {
      if (Date.now() > deadline) {
        throw new Error(`the fake received ${this.chats().length} chat requests, not ${n}`);
      }
      await sleep(5);
    }
    return this.chats()[n - 1];
  }

  protected abstract route(method: string, path: string): ((ctx: Parameters<ChatHandler>[0]) => Promise<void>) | null;

  private async dispatch(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) {
      chunks.push(chunk as Buffer);
    }
    const text = Buffer.concat(chunks).toString('utf8');
    const rec: Recorded = {
      method: req.method ?? '',
      path: (req.url ?? '').split('?')[0],
      headers: req.headers,
      body: text ? JSON.parse(text) : undefined,
      receivedAt: Date.now(),
      closedAt: null,
      completed: false,
    };
    this.requests.push(rec);
    res.on('close', () => {
      closed.add(res);
      rec.closedAt = Date.now();
      rec.completed = res.writableFinished;
    });
    const handler = this.route(rec.method, rec.path);
    if (!handler) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('404 page not found');
      return;
    }
    try {
      await handler({ req, res, body: rec.body, rec });
    } catch {
      res.destroy();
    }
  }

  protected chatHandler(model: string): ChatHandler | undefined {
    return this.handlers.get(model) ?? this.handlers.get('*');
  }
}

/** Responses whose connection closed. */
const closed = new WeakSet<ServerResponse>();

/** Waits `ms`, or less if the client went away; returns whether the client is still there. */
async function pause(res: ServerResponse, ms: number): Promise<boolean> {
  const until = Date.now() + ms;
  while (Date.now() < until && !closed.has(res)) {
    await sleep(Math.min(10, until - Date.now()));
  }
  return !closed.has(res);
}

const json = (res: ServerResponse, status: number, body: unknown) =>
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' }).end(JSON.stringify(body));

// ---------------------------------------------------------------------------------------------- Ollama

export interface OllamaReply {
  /** Content pieces, one NDJSON line each. */
  content?: string[];
  /** Thinking pieces, sent before the content. */
  thinking?: string[];
  /** Tool calls, sent in one line as Ollama does (arguments as objects). */
  toolCalls?: { name: string; arguments: Record<string, unknown> }[];
  doneReason?: 'stop' | 'length';
  promptEvalCount?: number;
  evalCount?: number;
  /** Silence before the first line (model load, prompt evaluation). */
  firstLineDelayMs?: number;
  /** Pause between lines. */
  intervalMs?: number;
  /** Attach logprobs to each content line. */
  logprobs?: boolean;
}

/** A fake Ollama: /api/version, /api/tags and /api/chat with NDJSON streaming. */
export class FakeOllama extends FakeRuntime {
  version = '0.12.11';
  models: string[] = [];
  /** The digest /api/tags gives for every model (64 hex digits, as Ollama writes it). */
  digest = 'a80c4f17acd55265feec403c7aef86be0c25983ab279d83f3bcd3abbcb5b8b72';

  constructor(models: string[] = []) {
    super();
    this.models = models;
  }

  protected route(method: string, path: string) {
    if (method === 'GET' && path === '/api/version') {
      return async ({ res }: { res: ServerResponse }) => void json(res, 200, { version: this.version });
    }
    if (method === 'GET' && path === '/api/tags') {
      return async ({ res }: { res: ServerResponse }) =>
        void json(res, 200, {
          models: this.models.map((name) => ({
            name,
            model: name,
            modified_at: '2025-05-01T10:00:00.000000000+02:00',
            size: 2019393189,
            digest: this.digest,
            details: {
              parent_model: '',
              format: 'gguf',
              family: 'llama',
              families: ['llama'],
              parameter_size: '3.2B',
              quantization_level: 'Q4_K_M',
            },
          })),
        });
    }
    if (method === 'POST' && path === '/api/chat') {
      return async (ctx: Parameters<ChatHandler>[0]) => {
        const handler = this.chatHandler(String(ctx.body?.model));
        if (!handler) {
          json(ctx.res, 404, { error: `model '${String(ctx.body?.model)}' not found` });
          return;
        }
        await handler(ctx);
      };
    }
    return null;
  }

  /** A handler that streams a reply the way Ollama does. */
  static reply(reply: OllamaReply): ChatHandler {
    return async ({ res, body }) => {
      const model = String(body.model);
      const created = () => new Date().toISOString();
      const line = (value: unknown) => res.write(`${JSON.stringify(value)}\n`);
      if (!(await pause(res, reply.firstLineDelayMs ?? 0))) {
        return;
      }
      // Ollama writes its headers with the first line.
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      for (const thinking of reply.thinking ?? []) {
        line({ model, created_at: created(), message: { role: 'assistant', content: '', thinking }, done: false });
        if (!(await pause(res, reply.intervalMs ?? 0))) {
          return;
        }
      }
      for (const content of reply.content ?? []) {
        const logprobs = reply.logprobs
          ? {
              logprobs: [
                {
                  token: content,
                  logprob: -0.25,
                  bytes: [...Buffer.from(content)],
                  top_logprobs: [
                    { token: content, logprob: -0.25, bytes: [...Buffer.from(content)] },
                    { token: '?', logprob: -3.5, bytes: [63] },
                  ],
                },
              ],
            }
          : {};
        line({ model, created_at: created(), message: { role: 'assistant', content }, done: false, ...logprobs });
        if (!(await pause(res, reply.intervalMs ?? 0))) {
          return;
        }
      }
      if (reply.toolCalls) {
        line({
          model,
          created_at: created(),
          message: {
            role: 'assistant',
            content: '',
            tool_calls: reply.toolCalls.map((c) => ({ function: { name: c.name, arguments: c.arguments } })),
          },
          done: false,
        });
      }
      line({
        model,
        created_at: created(),
        message: { role: 'assistant', content: '' },
        done: true,
        done_reason: reply.doneReason ?? 'stop',
        total_duration: 4_883_583_458,
        load_duration: 1_334_875,
        prompt_eval_count: reply.promptEvalCount ?? 26,
        prompt_eval_duration: 342_546_000,
        eval_count: reply.evalCount ?? reply.content?.length ?? 0,
        eval_duration: 4_535_599_000,
      });
      res.end();
    };
  }

  /** A handler that answers with an HTTP error in Ollama's `{"error": "..."}` shape. */
  static error(status: number, message: string): ChatHandler {
    return async ({ res }) => void json(res, status, { error: message });
  }
}

// ---------------------------------------------------------------------------------------------- OpenAI

export interface OpenAIReply {
  /** Content pieces per choice (index = choice). */
  choices?: string[][];
  /** Reasoning pieces for choice 0, sent first as `reasoning_content`. */
  reasoning?: string[];
  /** Tool calls of choice 0, each sent in fragments: id and name, then the arguments in pieces. */
  toolCalls?: { id: string; name: string; arguments: string[] }[];
  finishReason?: 'stop' | 'length' | 'tool_calls';
  usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
  firstChunkDelayMs?: number;
  intervalMs?: number;
  logprobs?: boolean;
}

/** A fake OpenAI-compatible server (vLLM-like): /v1/models and /v1/chat/completions with SSE. */
export class FakeOpenAI extends FakeRuntime {
  models: string[] = [];
  ownedBy = 'vllm';

  constructor(models: string[] = []) {
    super();
    this.models = models;
  }

  get baseUrl(): string {
    return `${this.url}/v1`;
  }

  protected route(method: string, path: string) {
    if (method === 'GET' && path === '/v1/models') {
      return async ({ res }: { res: ServerResponse }) =>
        void json(res, 200, {
          object: 'list',
          data: this.models.map((id) => ({
            id,
            object: 'model',
            created: 1_715_000_000,
            owned_by: this.ownedBy,
            root: id,
            parent: null,
            max_model_len: 8192,
          })),
        });
    }
    if (method === 'POST' && path === '/v1/chat/completions') {
      return async (ctx: Parameters<ChatHandler>[0]) => {
        const model = String(ctx.body?.model);
        const handler = this.chatHandler(model);
        if (!handler) {
          FakeOpenAI.sendError(ctx.res, 404, `The model \`${model}\` does not exist.`, 'NotFoundError', 404);
          return;
        }
        await handler(ctx);
      };
    }
    return null;
  }

  static sendError(res: ServerResponse, status: number, message: string, type: string, code: string | number | null) {
    json(res, status, { error: { message, type, param: null, code } });
  }

  /** A handler that streams `chat.completion.chunk` events the way vLLM does, then `[DONE]`. */
  static reply(reply: OpenAIReply): ChatHandler {
    return async ({ res, body }) => {
      const id = 'chatcmpl-3f1c2a9e8b7d4c6e';
      const base = { id, object: 'chat.completion.chunk', created: 1_715_000_123, model: String(body.model) };
      const send = (choices: unknown[], extra: Record<string, unknown> = {}) =>
        res.write(`data: ${JSON.stringify({ ...base, choices, ...extra })}\n\n`);
      const wait = () => pause(res, reply.intervalMs ?? 0);
      res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
      if (!(await pause(res, reply.firstChunkDelayMs ?? 0))) {
        return;
      }
      const choices = reply.choices ?? [[]];
      choices.forEach((_, index) =>
        send([{ index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }]),
      );
      for (const reasoning of reply.reasoning ?? []) {
        send([{ index: 0, delta: { reasoning_content: reasoning }, logprobs: null, finish_reason: null }]);
        if (!(await wait())) {
          return;
        }
      }
      const longest = Math.max(...choices.map((c) => c.length));
      for (let step = 0; step < longest; step++) {
        const out = choices.flatMap((pieces, index) => {
          if (step >= pieces.length) {
            return [];
          }
          const token = pieces[step];
          const logprobs = reply.logprobs
            ? {
                content: [
                  {
                    token,
                    logprob: -0.5,
                    bytes: [...Buffer.from(token)],
                    top_logprobs: [{ token, logprob: -0.5, bytes: [...Buffer.from(token)] }],
                  },
                ],
              }
            : null;
          return [{ index, delta: { content: token }, logprobs, finish_reason: null }];
        });
        // vLLM sends one chunk per choice and step.
        for (const choice of out) {
          send([choice]);
        }
        if (!(await wait())) {
          return;
        }
      }
      for (const [position, call] of (reply.toolCalls ?? []).entries()) {
        send([
          {
            index: 0,
            delta: {
              tool_calls: [
                { index: position, id: call.id, type: 'function', function: { name: call.name, arguments: '' } },
              ],
            },
            logprobs: null,
            finish_reason: null,
          },
        ]);
        for (const piece of call.arguments) {
          send([
            {
              index: 0,
              delta: { tool_calls: [{ index: position, function: { arguments: piece } }] },
              logprobs: null,
              finish_reason: null,
            },
          ]);
        }
      }
      choices.forEach((_, index) =>
        send([
          {
            index,
            delta: { content: '' },
            logprobs: null,
            finish_reason: reply.finishReason ?? 'stop',
            stop_reason: null,
          },
        ]),
      );
      if (body.stream_options?.include_usage) {
        send([], {
          usage: reply.usage ?? { prompt_tokens: 12, completion_tokens: longest, total_tokens: 12 + longest },
        });
      }
      res.end('data: [DONE]\n\n');
    };
  }

  /** A handler that answers with an HTTP error in OpenAI's `{"error": {...}}` shape. */
  static error(status: number, message: string, type = 'BadRequestError'): ChatHandler {
    return async ({ res }) => FakeOpenAI.sendError(res, status, message, type, status);
  }
}
