import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import { embeddingOf, tokensOf } from './embedding-vectors';

/**
 * A fake OpenAI-compatible server for the relay and embeddings scenarios: /v1/models, a streamed
 * /v1/chat/completions with a fixed time to first token and a fixed interval between tokens, in
 * OpenAI's `chat.completion.chunk` format (role chunk, one content chunk per token, a finish chunk,
 * the usage chunk when asked for, `[DONE]`), and /v1/embeddings as vLLM answers it.
 */
export interface UpstreamOptions {
  /** Models listed by /v1/models. */
  models: string[];
  ttftMs: number;
  tokenIntervalMs: number;
  /** Reply length in tokens (max_tokens may cut it). */
  tokens: number;
  /**
   * /v1/embeddings: the runtime's time per input (one of about 30 tokens). A GPU embeds a batch in
   * time roughly proportional to its inputs, and runs one batch at a time: a request waits for the
   * ones before it. Default {@link DEFAULT_EMBED_INPUT_MS}.
   */
  embedInputMs?: number;
  /** /v1/embeddings: the vectors' length. Default {@link DEFAULT_EMBED_DIMENSIONS}. */
  embedDimensions?: number;
}

/** About what a consumer GPU takes for an input of 30 tokens of a small embedding model. */
export const DEFAULT_EMBED_INPUT_MS = 2;
/** nomic-embed-text's. */
export const DEFAULT_EMBED_DIMENSIONS = 768;

/** One /v1/embeddings request as the upstream served it; times in epoch ms (comparable across the machine's processes). */
export interface EmbedServed {
  inputs: number;
  arrivedAt: number;
  /** When the GPU took it (after the requests before it). */
  computeStart: number;
  computeEnd: number;
  /** When the whole answer had been handed to the kernel. */
  writtenAt: number;
  bytes: number;
}

/** A request can carry `[bench:<id>]` in its messages; the upstream then records when it arrived and when its first token left. */
const MARKER = /\[bench:([A-Za-z0-9-]{1,64})\]/;
/** Epoch milliseconds with sub-millisecond precision, comparable across processes of this machine. */
const epochMs = () => performance.timeOrigin + performance.now();

/** marker → [request arrived, first token written], epoch ms. */
export type UpstreamTimings = Map<string, [number, number]>;

const WORDS = ['relay', 'signal', 'harbor', 'copper', 'steady', 'bright', 'north', 'station', 'quiet', 'river'];

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => resolve(body));
    req.on('error', reject);
  });
}

function json(res: ServerResponse, status: number, value: unknown): void {
  const body = JSON.stringify(value);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

export function createUpstream(options: UpstreamOptions, timings?: UpstreamTimings, embedLog?: EmbedServed[]): Server {
  const created = Math.floor(Date.now() / 1000);
  const embedInputMs = options.embedInputMs ?? DEFAULT_EMBED_INPUT_MS;
  const dimensions = options.embedDimensions ?? DEFAULT_EMBED_DIMENSIONS;
  /** When the one GPU is free again (performance.now() time): requests queue behind each other. */
  let gpuFreeAt = 0;
  const server = http.createServer((req, res) => {
    void handle(req, res).catch(() => {
      if (!res.headersSent) {
        json(res, 500, { error: { message: 'bench upstream failed', type: 'server_error' } });
      } else {
        res.destroy();
      }
    });
  });
  // Clients open many connections at once: keep the accept backlog out of the measurement.
  server.maxHeadersCount = 100;
  server.keepAliveTimeout = 60_000;

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const arrived = epochMs();
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && path === '/v1/models') {
      json(res, 200, {
        object: 'list',
        data: options.models.map((id) => ({ id, object: 'model', created, owned_by: 'bench' })),
      });
      return;
    }
    if (req.method === 'POST' && path === '/v1/embeddings') {
      await embeddings(req, res, arrived);
      return;
    }
    if (req.method !== 'POST' || path !== '/v1/chat/completions') {
      json(res, 404, { error: { message: `no route ${req.method} ${path}`, type: 'invalid_request_error' } });
      return;
    }
    const raw = await readBody(req);
    const marker = timings ? MARKER.exec(raw)?.[1] : undefined;
    const body = JSON.parse(raw) as {
      model?: string;
      max_tokens?: number;
      stream?: boolean;
      stream_options?: { include_usage?: boolean };
    };
    const model = body.model ?? options.models[0];
    const count = Math.max(1, Math.min(options.tokens, body.max_tokens ?? options.tokens));
    const id = `chatcmpl-${randomBytes(12).toString('hex')}`;
    const usage = { prompt_tokens: 8, completion_tokens: count, total_tokens: 8 + count };
    const token = (i: number) => (i === 0 ? 'Bench' : ` ${WORDS[i % WORDS.length]}`);
    if (!body.stream) {
      setTimeout(
        () =>
          json(res, 200, {
            id,
            object: 'chat.completion',
            created,
            model,
            choices: [
              {
                index: 0,
                message: { role: 'assistant', content: Array.from({ length: count }, (_, i) => token(i)).join('') },
                logprobs: null,
                finish_reason: 'stop',
              },
            ],
            usage,
          }),
        options.ttftMs + (count - 1) * options.tokenIntervalMs,
      );
      return;
    }
    const withUsage = body.stream_options?.include_usage === true;
    const frame = (choices: unknown[], usageValue?: unknown) =>
      `data: ${JSON.stringify({
        id,
        object: 'chat.completion.chunk',
        created,
        model,
        system_fingerprint: 'fp_bench',
        choices,
        ...(withUsage ? { usage: usageValue ?? null } : {}),
      })}\n\n`;
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    // As vLLM does: the role chunk at once, the content from the first token on.
    res.write(frame([{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }]));
    const start = performance.now();
    let sent = 0;
    let timer: NodeJS.Timeout | null = null;
    res.on('close', () => {
      if (timer) {
        clearTimeout(timer);
      }
    });
    const next = () => {
      timer = null;
      if (res.destroyed) {
        return;
      }
      res.write(frame([{ index: 0, delta: { content: token(sent) }, logprobs: null, finish_reason: null }]));
      if (sent === 0 && marker) {
        timings?.set(marker, [arrived, epochMs()]);
      }
      sent++;
      if (sent < count) {
        // Scheduled against the start, so that timer lateness does not accumulate over the reply.
        const due = start + options.ttftMs + sent * options.tokenIntervalMs;
        timer = setTimeout(next, Math.max(0, due - performance.now()));
        return;
      }
      let tail = frame([{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }]);
      if (withUsage) {
        tail += frame([], usage);
      }
      res.end(`${tail}data: [DONE]\n\n`);
    };
    timer = setTimeout(next, options.ttftMs);
  }

  /**
   * vLLM's /v1/embeddings: `{object: "list", data: [{object: "embedding", index, embedding}], model,
   * usage}`, the vectors as JSON numbers (float32 values widened to doubles and printed in full, as
   * Python's json prints them) or, for `encoding_format: "base64"`, little-endian float32 in base64.
   * Answered when the GPU has computed it: after the requests queued before it, and `embedInputMs` per
   * input. The vectors are rendered after that, on this process's CPU, as a server's API layer does.
   */
  async function embeddings(req: IncomingMessage, res: ServerResponse, arrived: number): Promise<void> {
    const body = JSON.parse(await readBody(req)) as { model?: string; input?: unknown; encoding_format?: string };
    const raw = typeof body.input === 'string' ? [body.input] : body.input;
    if (!Array.isArray(raw) || raw.length === 0) {
      json(res, 400, { error: { message: 'input must be a string or a non-empty array', type: 'BadRequestError' } });
      return;
    }
    // Texts, or token ids (hashed by their JSON: still one vector per input, deterministic).
    const inputs = raw.map((i) => (typeof i === 'string' ? i : JSON.stringify(i)));
    const now = performance.now();
    const start = Math.max(now, gpuFreeAt);
    const end = start + inputs.length * embedInputMs;
    gpuFreeAt = end;
    await new Promise((resolve) => setTimeout(resolve, end - now));
    const base64 = body.encoding_format === 'base64';
    const data = inputs.map((text, index) => {
      const vector = embeddingOf(text, dimensions);
      return {
        object: 'embedding',
        index,
        embedding: base64 ? Buffer.from(vector.buffer).toString('base64') : Array.from(vector),
      };
    });
    const promptTokens = inputs.reduce((n, text) => n + tokensOf(text), 0);
    const answer = JSON.stringify({
      id: `embd-${randomBytes(12).toString('hex')}`,
      object: 'list',
      created,
      model: body.model ?? options.models[0],
      data,
      usage: { prompt_tokens: promptTokens, total_tokens: promptTokens, completion_tokens: 0 },
    });
    const bytes = Buffer.byteLength(answer);
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': bytes });
    res.end(answer, () => {
      embedLog?.push({
        inputs: inputs.length,
        arrivedAt: arrived,
        computeStart: performance.timeOrigin + start,
        computeEnd: performance.timeOrigin + end,
        writtenAt: epochMs(),
        bytes,
      });
    });
  }

  return server;
}
