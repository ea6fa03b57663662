import { createHash } from 'node:crypto';
import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { freePort, sleep } from '../../support/stack';

/**
 * Fake local runtimes for the device agent's end-to-end tests: real HTTP servers that speak Ollama's
 * and OpenAI's wire formats (NDJSON and SSE framing, final lines, usage, error bodies; embeddings in
 * one JSON body) and record every request they receive, including when the agent closed its connection.
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

/** What a chat handler is given: the request, its record, and what the runtime continues. */
export interface ChatContext {
  req: IncomingMessage;
  res: ServerResponse;
  body: any;
  rec: Recorded;
  /**
   * The text of the final assistant message the runtime continues (its assistant prefill), decided as
   * the real runtime decides it (see each fake's `continued`); undefined when it starts a new reply.
   */
  prefix?: string;
}

/** Answers one chat request; `rec` is its record. */
export type ChatHandler = (ctx: ChatContext) => Promise<void>;

abstract class FakeRuntime {
  readonly requests: Recorded[] = [];
  port = 0;
  private server: Server | null = null;
  private readonly sockets = new Set<Socket>();
  /** Handlers by upstream model name; `*` for any other. */
  readonly handlers = new Map<string, ChatHandler>();

  /** The length of the vectors the fake embeds into (every model's), as {@link fakeEmbedding} makes them. */
  embedDimensions = 768;
  /**
   * How long an embedding request takes per input before the answer (a runtime's evaluation), so that
   * a benchmark sees time grow with a batch; the wait ends early when the client goes away.
   */
  embedDelayMsPerInput = 0;
  /** How many of the next embedding requests fail with a 500 in the runtime's error shape (each takes one). */
  embedFailures = 0;
  /**
   * The model's context, in the fake's tokens ({@link fakeEmbeddingTokens}): a longer input is cut to it
   * (Ollama, unless `truncate: false`) or refused with the runtime's 400 (Ollama with `truncate: false`, vLLM).
   */
  embedContextTokens = 8192;
  /** The path of the runtime's embedding endpoint; every other POST is a chat. */
  protected abstract readonly embedPath: string;

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

  /** Chat requests (not probes, not embeddings) received so far. */
  chats(): Recorded[] {
    return this.requests.filter((r) => r.method === 'POST' && r.path !== this.embedPath);
  }

  /** Embedding requests received so far. */
  embeds(): Recorded[] {
    return this.requests.filter((r) => r.method === 'POST' && r.path === this.embedPath);
  }

  lastEmbed(): Recorded {
    const last = this.embeds().at(-1);
    if (!last) {
      throw new Error('no embedding request received');
    }
    return last;
  }

  /** Waits until `n` embedding requests arrived. */
  async waitEmbeds(n: number, timeoutMs = 10_000): Promise<Recorded> {
    const deadline = Date.now() + timeoutMs;
    while (this.embeds().length < n) {
      if (Date.now() > deadline) {
        throw new Error(`the fake received ${this.embeds().length} embedding requests, not ${n}`);
      }
      await sleep(5);
    }
    return this.embeds()[n - 1];
  }

  /** Takes one of {@link embedFailures}: whether this embedding request is to fail. */
  protected embedFails(): boolean {
    if (this.embedFailures <= 0) {
      return false;
    }
    this.embedFailures--;
    return true;
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

  protected abstract route(method: string, path: string): ((ctx: ChatContext) => Promise<void>) | null;

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

/** A message's text: a string, OpenAI's text parts joined, or '' for null. */
function textOf(content: unknown): string {
  if (typeof content === 'string') {
    return content;
  }
  return Array.isArray(content) ? content.map((p: any) => (typeof p?.text === 'string' ? p.text : '')).join('') : '';
}

/** A fake runtime's tokens: words with their leading whitespace; they join back to the text. */
export function textPieces(text: string): string[] {
  return text.match(/\s*\S+|\s+$/g) ?? [];
}

/**
 * The reply {@link FakeOllama.conversation} and {@link FakeOpenAI.conversation} give: a fixed text
 * derived from the conversation's last user message, so that a request always gets the same text, and
 * a continued one the rest of it.
 */
export function conversationText(messages: unknown): string {
  const list = Array.isArray(messages) ? messages : [];
  const question = textOf([...list].reverse().find((m: any) => m?.role === 'user')?.content);
  return `You asked: ${question} Here is the answer, one word at a time, the same every time you ask.`;
}

/**
 * What a runtime continuing `prefix` emits of a reply whose uninterrupted pieces are `all`: the pieces
 * after the prefix (the first one cut where the prefix ends inside it), and the prefix's tokens, which
 * the runtime counts as prompt (the pieces it covers). A prefix that is not the start of the reply is
 * someone else's text: the whole reply follows it.
 */
export function afterPrefix(all: string[], prefix: string | undefined): { rest: string[]; prefixTokens: number } {
  if (prefix === undefined) {
    return { rest: all, prefixTokens: 0 };
  }
  if (!all.join('').startsWith(prefix)) {
    return { rest: all, prefixTokens: textPieces(prefix).length };
  }
  let consumed = 0;
  let covered = 0;
  while (covered < all.length && consumed + all[covered].length <= prefix.length) {
    consumed += all[covered].length;
    covered++;
  }
  const rest = all.slice(covered);
  if (consumed < prefix.length) {
    rest[0] = rest[0].slice(prefix.length - consumed);
    covered++;
  }
  return { rest, prefixTokens: covered };
}

/**
 * A runtime that fails mid-answer, after `chunks` content chunks: with its own error in the stream
 * (`error`, the default: Ollama's `{"error": "..."}` line, vLLM's error event), or by dropping the
 * connection (`close`: the runtime's process died).
 */
export interface StreamBreak {
  chunks: number;
  how?: 'error' | 'close';
  message?: string;
}

// ------------------------------------------------------------------------------------------ Embeddings

/** One input of an embedding request: a text, or token ids. */
export type FakeEmbedInput = string | readonly number[];

/**
 * The vector both fakes embed an input into, `dimensions` long: deterministic (from SHA-256 of the
 * input), of L2 norm 1 to float32's precision, and every value a float32 (Math.fround), so that what
 * reaches a client can be compared with it bit for bit. A vector of k dimensions is what the fakes
 * answer for `dimensions: k` (the first k values of the same draws, normalised again). Ollama's fake
 * writes each value as Go writes a float32 (its shortest decimal), vLLM's as Python writes it (the
 * float32's exact double): both read back to these values through Math.fround.
 */
export function fakeEmbedding(input: FakeEmbedInput, dimensions: number): number[] {
  const seed = createHash('sha256')
    .update(typeof input === 'string' ? `text\0${input}` : `tokens\0${input.join(',')}`)
    .digest();
  const raw: number[] = [];
  for (let block = 0; raw.length < dimensions; block++) {
    const digest = createHash('sha256').update(seed).update(String(block)).digest();
    for (let i = 0; i < 8 && raw.length < dimensions; i++) {
      raw.push(digest.readUInt32LE(i * 4) / 2 ** 31 - 1);
    }
  }
  const norm = Math.sqrt(raw.reduce((sum, v) => sum + v * v, 0)) || 1;
  return raw.map((v) => Math.fround(v / norm));
}

/** The tokens the fakes count for an input (their `prompt_eval_count` and `usage.prompt_tokens`): words, or ids. */
export function fakeEmbeddingTokens(input: FakeEmbedInput): number {
  return typeof input === 'string' ? textPieces(input).length : input.length;
}

/** A float32 as Go's encoding/json writes it: the shortest decimal that reads back to the same float32. */
function goFloat32(value: number): number {
  for (let digits = 1; digits <= 9; digits++) {
    const shortest = Number(value.toPrecision(digits));
    if (Math.fround(shortest) === value) {
      return shortest;
    }
  }
  return value;
}

/** A float32 vector as OpenAI's `base64` encoding gives it (vLLM: numpy's float32 bytes, little-endian). */
function base64Vector(values: number[]): string {
  const floats = Float32Array.from(values);
  return Buffer.from(floats.buffer, floats.byteOffset, floats.byteLength).toString('base64');
}

const isTokenList = (value: unknown): value is number[] =>
  Array.isArray(value) && value.length > 0 && value.every((t) => Number.isInteger(t) && t >= 0);

// ---------------------------------------------------------------------------------------------- Ollama

export interface OllamaReply {
  /** Content pieces, one NDJSON line each; a continued reply sends those after the prefix. */
  content?: string[];
  /** Thinking pieces, sent before the content (not in a continued reply: the answer had begun). */
  thinking?: string[];
  /** Tool calls, sent in one line as Ollama does (arguments as objects). */
  toolCalls?: { name: string; arguments: Record<string, unknown> }[];
  doneReason?: 'stop' | 'length';
  /** The prompt's tokens (default 26); a continued prefix's tokens are added, as Ollama counts them. */
  promptEvalCount?: number;
  /** Default: the content lines sent. */
  evalCount?: number;
  /** Silence before the first line (model load, prompt evaluation). */
  firstLineDelayMs?: number;
  /** Pause between lines. */
  intervalMs?: number;
  /** Attach logprobs to each content line. */
  logprobs?: boolean;
  /** Fail after this many content lines instead of finishing. */
  breakAfter?: StreamBreak;
}

/** Ollama's message for a runner that failed mid-answer. */
const OLLAMA_RUNNER_ERROR = 'an error was encountered while running the model';

/** Whether a version string (`0.12.11`) is at least `min`. */
function versionAtLeast(version: string, min: number[]): boolean {
  const parts = version.split(/[.-]/).slice(0, 3).map(Number);
  for (let i = 0; i < min.length; i++) {
    if ((parts[i] ?? 0) !== min[i]) {
      return (parts[i] ?? 0) > min[i];
    }
  }
  return true;
}

/** A fake Ollama: /api/version, /api/tags, /api/chat with NDJSON streaming, and /api/embed. */
export class FakeOllama extends FakeRuntime {
  version = '0.12.11';
  models: string[] = [];
  protected readonly embedPath = '/api/embed';
  /** The digest /api/tags gives for every model (64 hex digits, as Ollama writes it). */
  digest = 'a80c4f17acd55265feec403c7aef86be0c25983ab279d83f3bcd3abbcb5b8b72';

  constructor(models: string[] = []) {
    super();
    this.models = models;
  }

  /**
   * What Ollama continues: from 0.2.8 a conversation that ends with assistant messages ends its prompt
   * with their text, left open (consecutive messages of a role are merged, joined by a blank line).
   */
  continued(body: any): string | undefined {
    const messages: any[] = Array.isArray(body?.messages) ? body.messages : [];
    let first = messages.length;
    while (first > 0 && messages[first - 1]?.role === 'assistant') {
      first--;
    }
    if (first === messages.length || !versionAtLeast(this.version, [0, 2, 8])) {
      return undefined;
    }
    const text = messages
      .slice(first)
      .map((m) => textOf(m.content))
      .join('\n\n');
    return text === '' ? undefined : text;
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
      return async (ctx: ChatContext) => {
        const handler = this.chatHandler(String(ctx.body?.model));
        if (!handler) {
          json(ctx.res, 404, { error: `model '${String(ctx.body?.model)}' not found` });
          return;
        }
        await handler({ ...ctx, prefix: this.continued(ctx.body) });
      };
    }
    if (method === 'POST' && path === this.embedPath) {
      return (ctx: ChatContext) => this.embed(ctx);
    }
    return null;
  }

  /**
   * /api/embed as Ollama answers it: `input` a text or a list of texts (anything else: 400 "invalid input
   * type"), a model it has (`name` and `name:latest` alike; otherwise 404), each input cut to the
   * context or, with `truncate: false`, refused (400), `dimensions` honoured from 0.11.11 (the first k
   * values, normalised again; older versions ignore it), and `prompt_eval_count` left out when 0.
   */
  private async embed({ res, body }: ChatContext): Promise<void> {
    const model = String(body?.model);
    const input: unknown = body?.input;
    let texts: string[];
    if (typeof input === 'string') {
      texts = input === '' ? [] : [input];
    } else if (Array.isArray(input) && input.every((i) => typeof i === 'string')) {
      texts = input;
    } else if (input === undefined || input === null) {
      texts = [];
    } else {
      json(res, 400, { error: 'invalid input type' });
      return;
    }
    if (!this.models.some((m) => m === model || m === `${model}:latest`)) {
      json(res, 404, { error: `model '${model}' not found` });
      return;
    }
    if (this.embedFails()) {
      json(res, 500, { error: OLLAMA_RUNNER_ERROR });
      return;
    }
    const cut: string[] = [];
    for (const text of texts) {
      const pieces = textPieces(text);
      if (pieces.length > this.embedContextTokens && body?.truncate === false) {
        json(res, 400, { error: 'the input length exceeds the context length' });
        return;
      }
      cut.push(pieces.slice(0, this.embedContextTokens).join(''));
    }
    if (!(await pause(res, this.embedDelayMsPerInput * texts.length))) {
      return;
    }
    const asked = typeof body?.dimensions === 'number' ? body.dimensions : 0;
    const dimensions =
      versionAtLeast(this.version, [0, 11, 11]) && asked > 0 && asked < this.embedDimensions
        ? asked
        : this.embedDimensions;
    const tokens = cut.reduce((sum, text) => sum + fakeEmbeddingTokens(text), 0);
    json(res, 200, {
      model,
      embeddings: cut.map((text) => fakeEmbedding(text, dimensions).map(goFloat32)),
      total_duration: 14_143_917,
      load_duration: 1_019_500,
      // Go's omitempty: no count at all when it is 0.
      ...(tokens > 0 ? { prompt_eval_count: tokens } : {}),
    });
  }

  /** A handler that streams {@link conversationText}, continued where the request's prefix ends. */
  static conversation(reply: Omit<OllamaReply, 'content'> = {}): ChatHandler {
    return (ctx) => FakeOllama.reply({ ...reply, content: textPieces(conversationText(ctx.body?.messages)) })(ctx);
  }

  /** A handler that streams a reply the way Ollama does (the rest of it after a continued prefix). */
  static reply(reply: OllamaReply): ChatHandler {
    return async ({ res, body, prefix }) => {
      const model = String(body.model);
      const created = () => new Date().toISOString();
      const line = (value: unknown) => res.write(`${JSON.stringify(value)}\n`);
      const { rest, prefixTokens } = afterPrefix(reply.content ?? [], prefix);
      const thinking = prefix === undefined ? (reply.thinking ?? []) : [];
      const broken = reply.breakAfter;
      const sent = broken ? rest.slice(0, broken.chunks) : rest;
      if (!(await pause(res, reply.firstLineDelayMs ?? 0))) {
        return;
      }
      if (broken && (broken.how ?? 'error') === 'error' && sent.length === 0 && thinking.length === 0) {
        // Nothing written yet: Ollama answers the error with a status instead.
        json(res, 500, { error: broken.message ?? OLLAMA_RUNNER_ERROR });
        return;
      }
      // Ollama writes its headers with the first line.
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      for (const piece of thinking) {
        line({
          model,
          created_at: created(),
          message: { role: 'assistant', content: '', thinking: piece },
          done: false,
        });
        if (!(await pause(res, reply.intervalMs ?? 0))) {
          return;
        }
      }
      for (const content of sent) {
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
      if (broken) {
        if ((broken.how ?? 'error') === 'close') {
          res.destroy();
        } else {
          // As Ollama's streamResponse does: the error as a line of its own, and the stream ends.
          line({ error: broken.message ?? OLLAMA_RUNNER_ERROR });
          res.end();
        }
        return;
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
        prompt_eval_count: (reply.promptEvalCount ?? 26) + prefixTokens,
        prompt_eval_duration: 342_546_000,
        eval_count: reply.evalCount ?? rest.length,
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
  /** Content pieces per choice (index = choice); a continued reply sends those after the prefix. */
  choices?: string[][];
  /** Reasoning pieces for choice 0, sent first as `reasoning_content` (not in a continued reply). */
  reasoning?: string[];
  /** Tool calls of choice 0, each sent in fragments: id and name, then the arguments in pieces. */
  toolCalls?: { id: string; name: string; arguments: string[] }[];
  finishReason?: 'stop' | 'length' | 'tool_calls';
  /**
   * As given; by default 12 prompt tokens (and a continued prefix's tokens, as the server counts them)
   * and the longest choice's pieces sent.
   */
  usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
  firstChunkDelayMs?: number;
  intervalMs?: number;
  logprobs?: boolean;
  /** Fail after this many content steps (one chunk per choice each) instead of finishing. */
  breakAfter?: StreamBreak;
}

/** What the fake answers a continuation request it refuses with: the status and the server's own error body. */
interface Refusal {
  status: number;
  body: unknown;
}

/**
 * A fake OpenAI-compatible server: /v1/models and /v1/chat/completions with SSE, vLLM by default
 * (`ownedBy` `vllm`); `llamacpp` makes it llama.cpp's server, anything else another server (LM Studio).
 */
export class FakeOpenAI extends FakeRuntime {
  models: string[] = [];
  ownedBy = 'vllm';
  protected readonly embedPath = '/v1/embeddings';
  /**
   * Whether the models are matryoshka ones: vLLM honours `dimensions` for those and refuses it (400)
   * for any other.
   */
  embedMatryoshka = false;
  /** Answer the vectors in reverse order, each with its index (OpenAI's format allows any order). */
  embedReversed = false;
  /**
   * Refuse `encoding_format: "base64"` with a 400, as an OpenAI-compatible server that has only floats
   * does, in the top-level error shape of older vLLM builds (`{"object": "error", "message", ...}`).
   */
  embedRefusesBase64 = false;

  constructor(models: string[] = []) {
    super();
    this.models = models;
  }

  get baseUrl(): string {
    return `${this.url}/v1`;
  }

  /**
   * What the server continues. vLLM: the final assistant message, only with `continue_final_message:
   * true` and `add_generation_prompt: false` (both true is an error). llama.cpp: a final assistant message
   * always (its assistant prefill; two at the end is an error, and so is continue_final_message with
   * add_generation_prompt true). Another server answers a new reply after it.
   */
  continued(body: any): { prefix?: string } | Refusal {
    const messages: any[] = Array.isArray(body?.messages) ? body.messages : [];
    const last = messages.at(-1);
    const prefix = last?.role === 'assistant' ? textOf(last.content) : undefined;
    const continues = Boolean(body?.continue_final_message);
    if (this.ownedBy === 'vllm') {
      if (!continues) {
        return {};
      }
      if (body.add_generation_prompt !== false) {
        // vLLM's validator refuses both true; left out, add_generation_prompt defaults to true and the
        // chat template refuses the pair.
        return vllmRefusal('continue_final_message and add_generation_prompt are not compatible.');
      }
      return { prefix };
    }
    if (this.ownedBy === 'llamacpp') {
      if (continues && body.add_generation_prompt === true) {
        // Builds since ggml-org/llama.cpp#23012 refuse the pair, as vLLM does (the wording is the fake's).
        return llamaCppRefusal('Cannot use continue_final_message together with add_generation_prompt.');
      }
      if (prefix !== undefined && messages.at(-2)?.role === 'assistant') {
        return llamaCppRefusal('Cannot have 2 or more assistant messages at the end of the list.');
      }
      return { prefix };
    }
    return {};
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
      return async (ctx: ChatContext) => {
        const model = String(ctx.body?.model);
        const handler = this.chatHandler(model);
        if (!handler) {
          FakeOpenAI.sendError(ctx.res, 404, `The model \`${model}\` does not exist.`, 'NotFoundError', 404);
          return;
        }
        const continued = this.continued(ctx.body);
        if ('status' in continued) {
          json(ctx.res, continued.status, continued.body);
          return;
        }
        await handler({ ...ctx, prefix: continued.prefix });
      };
    }
    if (method === 'POST' && path === this.embedPath) {
      return (ctx: ChatContext) => this.embed(ctx);
    }
    return null;
  }

  /**
   * /v1/embeddings as vLLM answers it: `input` a text, a list of texts, a list of token ids or a list
   * of lists of them; `encoding_format` `float` (the default) or `base64` (unless {@link embedRefusesBase64});
   * `dimensions` for a matryoshka model only; an input longer than the context refused with vLLM's 400;
   * `usage.prompt_tokens` counted.
   */
  private async embed({ res, body }: ChatContext): Promise<void> {
    const model = String(body?.model);
    if (!this.models.includes(model)) {
      FakeOpenAI.sendError(res, 404, `The model \`${model}\` does not exist.`, 'NotFoundError', 404);
      return;
    }
    const input: unknown = body?.input;
    let inputs: FakeEmbedInput[];
    if (typeof input === 'string') {
      inputs = [input];
    } else if (isTokenList(input)) {
      inputs = [input];
    } else if (
      Array.isArray(input) &&
      input.length > 0 &&
      (input.every((i) => typeof i === 'string') || input.every(isTokenList))
    ) {
      inputs = input;
    } else {
      FakeOpenAI.sendError(res, 400, 'input must be a text, a list of texts or of token ids', 'BadRequestError', 400);
      return;
    }
    const format = body?.encoding_format ?? 'float';
    if (format !== 'float' && format !== 'base64') {
      FakeOpenAI.sendError(res, 400, `unsupported encoding_format: ${String(format)}`, 'BadRequestError', 400);
      return;
    }
    if (format === 'base64' && this.embedRefusesBase64) {
      json(res, 400, {
        object: 'error',
        message: "encoding_format 'base64' is not supported",
        type: 'BadRequestError',
        param: null,
        code: 400,
      });
      return;
    }
    let dimensions = this.embedDimensions;
    if (body?.dimensions !== undefined && body?.dimensions !== null) {
      const asked: unknown = body.dimensions;
      if (!this.embedMatryoshka) {
        const message = `Model "${model}" does not support matryoshka representation, changing output dimensions will lead to poor results.`;
        FakeOpenAI.sendError(res, 400, message, 'BadRequestError', 400);
        return;
      }
      if (typeof asked !== 'number' || !Number.isInteger(asked) || asked < 1 || asked > this.embedDimensions) {
        const message = `dimensions must be from 1 to ${this.embedDimensions}`;
        FakeOpenAI.sendError(res, 400, message, 'BadRequestError', 400);
        return;
      }
      dimensions = asked;
    }
    for (const item of inputs) {
      const tokens = fakeEmbeddingTokens(item);
      if (tokens > this.embedContextTokens) {
        const message =
          `This model's maximum context length is ${this.embedContextTokens} tokens. However, you requested ` +
          `${tokens} tokens in the input for embedding generation. Please reduce the length of the input.`;
        FakeOpenAI.sendError(res, 400, message, 'BadRequestError', 400);
        return;
      }
    }
    if (this.embedFails()) {
      FakeOpenAI.sendError(
        res,
        500,
        'CUDA error: an illegal memory access was encountered',
        'InternalServerError',
        500,
      );
      return;
    }
    if (!(await pause(res, this.embedDelayMsPerInput * inputs.length))) {
      return;
    }
    const data = inputs.map((item, index) => {
      const vector = fakeEmbedding(item, dimensions);
      // Python writes a float32 it converted to float as that double's shortest decimal, as JSON.stringify does.
      return { index, object: 'embedding', embedding: format === 'base64' ? base64Vector(vector) : vector };
    });
    const tokens = inputs.reduce((sum, item) => sum + fakeEmbeddingTokens(item), 0);
    json(res, 200, {
      id: 'embd-5e0c1b7a9f3d4e2c8b6a',
      object: 'list',
      created: 1_715_000_456,
      model,
      data: this.embedReversed ? data.reverse() : data,
      usage: { prompt_tokens: tokens, total_tokens: tokens, completion_tokens: 0, prompt_tokens_details: null },
    });
  }

  static sendError(res: ServerResponse, status: number, message: string, type: string, code: string | number | null) {
    json(res, status, { error: { message, type, param: null, code } });
  }

  /** A handler that streams {@link conversationText} (for every choice asked), continued where the request's prefix ends. */
  static conversation(reply: Omit<OpenAIReply, 'choices'> = {}): ChatHandler {
    return (ctx) => {
      const text = textPieces(conversationText(ctx.body?.messages));
      const n = typeof ctx.body?.n === 'number' ? ctx.body.n : 1;
      return FakeOpenAI.reply({ ...reply, choices: Array.from({ length: n }, () => text) })(ctx);
    };
  }

  /**
   * A handler that streams `chat.completion.chunk` events the way vLLM does, then `[DONE]` (the rest of
   * each choice after a continued prefix).
   */
  static reply(reply: OpenAIReply): ChatHandler {
    return async ({ res, body, prefix }) => {
      const id = 'chatcmpl-3f1c2a9e8b7d4c6e';
      const base = { id, object: 'chat.completion.chunk', created: 1_715_000_123, model: String(body.model) };
      const send = (choices: unknown[], extra: Record<string, unknown> = {}) =>
        res.write(`data: ${JSON.stringify({ ...base, choices, ...extra })}\n\n`);
      const wait = () => pause(res, reply.intervalMs ?? 0);
      res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
      if (!(await pause(res, reply.firstChunkDelayMs ?? 0))) {
        return;
      }
      const continued = (reply.choices ?? [[]]).map((pieces) => afterPrefix(pieces, prefix));
      const choices = continued.map((c) => c.rest);
      choices.forEach((_, index) =>
        send([{ index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }]),
      );
      for (const reasoning of prefix === undefined ? (reply.reasoning ?? []) : []) {
        send([{ index: 0, delta: { reasoning_content: reasoning }, logprobs: null, finish_reason: null }]);
        if (!(await wait())) {
          return;
        }
      }
      const longest = Math.max(...choices.map((c) => c.length));
      const steps = reply.breakAfter ? Math.min(reply.breakAfter.chunks, longest) : longest;
      for (let step = 0; step < steps; step++) {
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
      if (reply.breakAfter) {
        if ((reply.breakAfter.how ?? 'error') === 'close') {
          res.destroy();
        } else {
          // vLLM's stream generator on an exception: the error as an event, then [DONE].
          const message = reply.breakAfter.message ?? 'CUDA error: an illegal memory access was encountered';
          res.write(
            `data: ${JSON.stringify({ error: { message, type: 'InternalServerError', param: null, code: 500 } })}\n\n`,
          );
          res.end('data: [DONE]\n\n');
        }
        return;
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
        const prompt = 12 + (continued[0]?.prefixTokens ?? 0);
        send([], {
          usage: reply.usage ?? { prompt_tokens: prompt, completion_tokens: longest, total_tokens: prompt + longest },
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

/** vLLM's 400 for a request its validation refuses. */
function vllmRefusal(message: string): Refusal {
  return { status: 400, body: { error: { message, type: 'BadRequestError', param: null, code: 400 } } };
}

/** llama.cpp's server's 400, in its own error shape. */
function llamaCppRefusal(message: string): Refusal {
  return { status: 400, body: { error: { code: 400, message, type: 'invalid_request_error' } } };
}
