import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';

/**
 * A fake OpenAI-compatible server for the relay scenario: /v1/models and a streamed
 * /v1/chat/completions with a fixed time to first token and a fixed interval between tokens, in
 * OpenAI's `chat.completion.chunk` format (role chunk, one content chunk per token, a finish chunk,
 * the usage chunk when asked for, `[DONE]`).
 */
export interface UpstreamOptions {
  /** Models listed by /v1/models. */
  models: string[];
  ttftMs: number;
  tokenIntervalMs: number;
  /** Reply length in tokens (max_tokens may cut it). */
  tokens: number;
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

export function createUpstream(options: UpstreamOptions, timings?: UpstreamTimings): Server {
  const created = Math.floor(Date.now() / 1000);
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

  return server;
}
