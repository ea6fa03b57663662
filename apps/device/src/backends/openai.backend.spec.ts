import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { createLogger } from '@app/common/logging/logger';
import type { ChatParams, ChoiceDelta } from '@app/common/protocol/chat';
import type { EmbedParams } from '@app/common/protocol/embeddings';
import { encodeVector } from '@app/common/protocol/embeddings';
import { openaiChatRequest } from './openai-chat-request';
import { OpenAIChatStream } from './openai-chat-stream';
import { OpenAIBackend, openaiFeatures, openaiIdentity, openaiServer } from './openai.backend';
import { SseDecoder } from './upstream/sse';

const event = (data: unknown) => ({ event: 'message', data: typeof data === 'string' ? data : JSON.stringify(data) });
const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) =>
  event({ id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'm', choices, ...extra });

function feed(stream: OpenAIChatStream, events: { event: string; data: string }[]): ChoiceDelta[][] {
  const out: ChoiceDelta[][] = [];
  for (const e of events) {
    const deltas = stream.push(e);
    if (deltas.length > 0) {
      out.push(deltas);
    }
  }
  const rest = stream.drain();
  if (rest.length > 0) {
    out.push(rest);
  }
  return out;
}

void describe('openaiChatRequest', () => {
  void it('passes the params through, streamed with usage', () => {
    const params: ChatParams = {
      messages: [
        { role: 'system', content: 's' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }],
        },
        { role: 'tool', content: 'r', tool_call_id: 'c1', name: 'f' },
      ],
      max_tokens: 32,
      temperature: 0.5,
      top_p: 0.8,
      stop: ['x'],
      frequency_penalty: 0.1,
      presence_penalty: 0.2,
      n: 2,
      response_format: { type: 'json_object' },
      tools: [{ type: 'function', function: { name: 'f' } }],
      tool_choice: 'auto',
      logprobs: true,
      top_logprobs: 2,
      logit_bias: { '42': -100 },
    };
    expect(openaiChatRequest('up-model', params)).toEqual({
      model: 'up-model',
      messages: [
        { role: 'system', content: 's' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }],
        },
        { role: 'tool', content: 'r', tool_call_id: 'c1' },
      ],
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: 32,
      temperature: 0.5,
      top_p: 0.8,
      frequency_penalty: 0.1,
      presence_penalty: 0.2,
      n: 2,
      response_format: { type: 'json_object' },
      tools: [{ type: 'function', function: { name: 'f' } }],
      tool_choice: 'auto',
      logit_bias: { '42': -100 },
      stop: ['x'],
      logprobs: true,
      top_logprobs: 2,
    });
  });
});

void describe('openaiChatRequest: a resumed task (assistant_prefix)', () => {
  const question: ChatParams['messages'] = [{ role: 'user', content: 'Name three rivers.' }];
  const resumed: ChatParams = { messages: question, max_tokens: 20, assistant_prefix: 'The Rhine, the' };

  void it('sends vLLM the answer so far as the final assistant message, with continue_final_message', () => {
    const body = openaiChatRequest('m', resumed, 'vllm');
    expect(body.messages).toEqual([...question, { role: 'assistant', content: 'The Rhine, the' }]);
    expect(body).toMatchObject({ continue_final_message: true, add_generation_prompt: false, max_tokens: 20 });
    expect('assistant_prefix' in body).toBe(false);
  });

  void it("sends llama.cpp's server the same final assistant message, which it prefills", () => {
    const body = openaiChatRequest('m', resumed, 'llamacpp');
    expect(body.messages).toEqual([...question, { role: 'assistant', content: 'The Rhine, the' }]);
    expect(body).toMatchObject({ continue_final_message: true, add_generation_prompt: false });
  });

  void it('joins a trailing assistant message for llama.cpp (which continued it), and follows it for vLLM', () => {
    const prefilled: ChatParams = {
      ...resumed,
      messages: [...question, { role: 'assistant', content: 'Sure: ' }],
      assistant_prefix: 'the Rhine',
    };
    expect(openaiChatRequest('m', prefilled, 'llamacpp').messages).toEqual([
      ...question,
      { role: 'assistant', content: 'Sure: the Rhine' },
    ]);
    expect(openaiChatRequest('m', prefilled, 'vllm').messages).toEqual([
      ...question,
      { role: 'assistant', content: 'Sure: ' },
      { role: 'assistant', content: 'the Rhine' },
    ]);
  });

  void it('sends no continuation fields without a prefix', () => {
    const body = openaiChatRequest('m', { messages: question, max_tokens: 20 }, 'vllm');
    expect(body.messages).toEqual(question);
    expect('continue_final_message' in body || 'add_generation_prompt' in body).toBe(false);
  });
});

void describe('openaiFeatures', () => {
  void it('declares continue for vLLM and llama.cpp only, and n except for llama.cpp', () => {
    expect(openaiServer(['vllm'])).toBe('vllm');
    expect(openaiServer(['llamacpp'])).toBe('llamacpp');
    expect(openaiServer(['organization-owner'])).toBe('other');
    expect(openaiServer(['vllm', 'llamacpp'])).toBe('other');
    expect(openaiServer([])).toBe('other');
    expect(openaiFeatures(['vllm'])).toEqual(expect.arrayContaining(['n', 'continue']));
    expect(openaiFeatures(['llamacpp'])).toContain('continue');
    expect(openaiFeatures(['llamacpp'])).not.toContain('n');
    // LM Studio (and a proxy before several servers) may start a new reply after the prefix.
    expect(openaiFeatures(['organization-owner'])).not.toContain('continue');
    expect(openaiFeatures([])).not.toContain('continue');
  });

  void it('declares embeddings with token inputs on every server, and never embed_dimensions', () => {
    for (const owners of [['vllm'], ['llamacpp'], ['organization-owner'], []]) {
      expect(openaiFeatures(owners)).toEqual(expect.arrayContaining(['embeddings', 'embed_tokens']));
      expect(openaiFeatures(owners)).not.toContain('embed_dimensions');
    }
  });
});

void describe('openaiChatRequest: web search and stop text', () => {
  void it('passes web_search_options on, and leaves the stop strings to the device when they are kept', () => {
    const params: ChatParams = {
      messages: [{ role: 'user', content: 'news?' }],
      max_tokens: 8,
      stop: ['END'],
      include_stop_str_in_output: true,
      web_search_options: { search_context_size: 'low' },
    };
    const body = openaiChatRequest('m', params);
    expect(body.web_search_options).toEqual({ search_context_size: 'low' });
    expect(body.stop).toBeUndefined();
    expect(body.include_stop_str_in_output).toBeUndefined();
    expect(openaiChatRequest('m', { ...params, include_stop_str_in_output: undefined }).stop).toEqual(['END']);
  });
});

void describe('OpenAIChatStream', () => {
  void it('relays content and reasoning, and reads finish reason and usage', () => {
    const stream = new OpenAIChatStream(1, false, 0);
    const deltas = feed(stream, [
      chunk([{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }]),
      chunk([{ index: 0, delta: { reasoning_content: 'think' }, finish_reason: null }]),
      chunk([{ index: 0, delta: { content: 'Hel' }, finish_reason: null }]),
      chunk([{ index: 0, delta: { content: 'lo' }, finish_reason: null }]),
      chunk([{ index: 0, delta: {}, finish_reason: 'length' }]),
      chunk([], { usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 } }),
      event('[DONE]'),
    ]);
    expect(deltas).toEqual([
      [{ index: 0, reasoning: 'think' }],
      [{ index: 0, content: 'Hel' }],
      [{ index: 0, content: 'lo' }],
    ]);
    expect(stream.result()).toEqual({
      finish_reasons: ['length'],
      usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 },
    });
  });

  void it('joins tool call fragments and emits each call whole when its choice finishes', () => {
    const stream = new OpenAIChatStream(1, false, 0);
    const deltas = feed(stream, [
      chunk([
        {
          index: 0,
          delta: {
            tool_calls: [{ index: 0, id: 'call_a', type: 'function', function: { name: 'get', arguments: '' } }],
          },
        },
      ]),
      chunk([{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: '{"ci' } }] } }]),
      chunk([{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: 'ty":"P"}' } }] } }]),
      chunk([
        {
          index: 0,
          delta: {
            tool_calls: [{ index: 1, id: 'call_b', type: 'function', function: { name: 'put', arguments: '{}' } }],
          },
        },
      ]),
      chunk([{ index: 0, delta: {}, finish_reason: 'tool_calls' }]),
      event('[DONE]'),
    ]);
    expect(deltas).toEqual([
      [
        {
          index: 0,
          tool_calls: [
            { id: 'call_a', type: 'function', function: { name: 'get', arguments: '{"city":"P"}' } },
            { id: 'call_b', type: 'function', function: { name: 'put', arguments: '{}' } },
          ],
        },
      ],
    ]);
    expect(stream.result()).toEqual({ finish_reasons: ['tool_calls'], usage: null });
  });

  void it('keeps n choices apart and maps logprobs', () => {
    const stream = new OpenAIChatStream(2, true, 1);
    const lp = (token: string) => ({
      content: [{ token, logprob: -0.5, bytes: null, top_logprobs: [{ token, logprob: -0.5, bytes: [1] }] }],
    });
    feed(stream, [
      chunk([{ index: 0, delta: { content: 'a' }, logprobs: lp('a') }]),
      chunk([{ index: 1, delta: { content: 'b' }, logprobs: lp('b') }]),
      chunk([
        { index: 0, delta: {}, finish_reason: 'stop' },
        { index: 1, delta: {}, finish_reason: 'length' },
      ]),
      event('[DONE]'),
    ]);
    expect(stream.result().finish_reasons).toEqual(['stop', 'length']);
    const one = new OpenAIChatStream(1, true, 1);
    const [[delta]] = feed(one, [chunk([{ index: 0, delta: { content: 'a' }, logprobs: lp('a') }])]);
    expect(delta.logprobs).toEqual([
      { token: 'a', logprob: -0.5, bytes: [97], top_logprobs: [{ token: 'a', logprob: -0.5, bytes: [1] }] },
    ]);
  });

  void it('refuses a server that ignored n or logprobs, a cut stream, errors and garbage', () => {
    const ignoredN = new OpenAIChatStream(2, false, 0);
    feed(ignoredN, [chunk([{ index: 0, delta: { content: 'a' }, finish_reason: 'stop' }]), event('[DONE]')]);
    expect(() => ignoredN.result()).toThrow(
      expect.objectContaining({ code: 'upstream_bad_response', message: expect.stringMatching(/n=2/) }),
    );

    const ignoredLogprobs = new OpenAIChatStream(1, true, 0);
    feed(ignoredLogprobs, [chunk([{ index: 0, delta: { content: 'a' }, finish_reason: 'stop' }]), event('[DONE]')]);
    expect(() => ignoredLogprobs.result()).toThrow(
      expect.objectContaining({ code: 'upstream_bad_response', message: expect.stringMatching(/logprobs/) }),
    );

    const cut = new OpenAIChatStream(1, false, 0);
    feed(cut, [chunk([{ index: 0, delta: { content: 'a' } }])]);
    expect(() => cut.result()).toThrow(expect.objectContaining({ code: 'upstream_bad_response' }));

    expect(() => new OpenAIChatStream(1, false, 0).push(event('{oops'))).toThrow(
      expect.objectContaining({ code: 'upstream_bad_response' }),
    );
    expect(() => new OpenAIChatStream(1, false, 0).push(chunk([{ index: 3, delta: {} }]))).toThrow(
      expect.objectContaining({ code: 'upstream_bad_response' }),
    );
    expect(() =>
      new OpenAIChatStream(1, false, 0).push(event({ error: { message: 'CUDA out of memory', type: 'server_error' } })),
    ).toThrow(
      expect.objectContaining({ code: 'upstream_error', message: expect.stringMatching(/CUDA out of memory/) }),
    );
  });
});

void describe('SseDecoder', () => {
  void it('decodes data lines, comments, multi-line data and a last event without its blank line', () => {
    const decoder = new SseDecoder();
    const lines = [': ping', 'data: {"a":1}', '', 'event: x', 'data:one', 'data: two', '', 'id: 3', '', 'data: [DONE]'];
    const events = lines.map((l) => decoder.line(l)).filter((e) => e !== null);
    expect(events).toEqual([
      { event: 'message', data: '{"a":1}' },
      { event: 'x', data: 'one\ntwo' },
    ]);
    expect(decoder.end()).toEqual({ event: 'message', data: '[DONE]' });
    expect(decoder.end()).toBeNull();
    const errors = new SseDecoder();
    errors.line('error: {"message":"boom"}');
    expect(errors.line('')).toEqual({ event: 'error', data: '{"message":"boom"}' });
  });
});

void describe('openaiIdentity', () => {
  void it("reads vLLM's root and max_model_len, and never a digest", () => {
    expect(
      openaiIdentity({ id: 'm', owned_by: 'vllm', root: 'meta-llama/Llama-3.1-8B-Instruct', max_model_len: 8192 }),
    ).toEqual({
      digest: null,
      family: null,
      parameter_size: null,
      quantization: null,
      root: 'meta-llama/Llama-3.1-8B-Instruct',
      context_length: 8192,
    });
    expect(openaiIdentity({ id: 'm', owned_by: 'lmstudio', max_model_len: -1, root: 3 })).toEqual(
      expect.objectContaining({ root: null, context_length: null }),
    );
  });
});

/** A local OpenAI-compatible server that answers each request as `answer` says, and records them. */
async function localServer(
  answer: (path: string, body: any) => { status: number; body: unknown },
  logger = createLogger('openai-embed-test', 'silent'),
) {
  const requests: { method: string; path: string; headers: http.IncomingHttpHeaders; body: any }[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      const request = {
        method: req.method ?? '',
        path: req.url ?? '',
        headers: req.headers,
        body: text && JSON.parse(text),
      };
      requests.push(request);
      const reply = answer(request.path, request.body);
      const payload = typeof reply.body === 'string' ? reply.body : JSON.stringify(reply.body);
      res.writeHead(reply.status, { 'content-type': 'application/json' }).end(payload);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const backend = new OpenAIBackend(
    {
      upstream: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`,
      models: [{ public: 'bge', upstream: 'BAAI/bge-m3' }],
      discoveryIntervalMs: 60_000,
      healthIntervalMs: 60_000,
    },
    logger,
  );
  cleanups.push(async () => {
    backend.stop();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });
  return { backend, requests, embeds: () => requests.filter((r) => r.path === '/v1/embeddings') };
}

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) {
    await cleanup();
  }
});

/** vLLM's answer, with the entries in the order given. */
const embeddingList = (data: { index: unknown; embedding: unknown }[], promptTokens: unknown = 7) => ({
  status: 200,
  body: {
    id: 'embd-1',
    object: 'list',
    created: 1,
    model: 'BAAI/bge-m3',
    data: data.map((d) => ({ object: 'embedding', ...d })),
    usage: { prompt_tokens: promptTokens, total_tokens: promptTokens, completion_tokens: 0 },
  },
});

void describe('OpenAIBackend.embed', () => {
  const embed = (backend: OpenAIBackend, params: EmbedParams) =>
    backend.embed({ model: 'bge', params }, new AbortController().signal);

  void it('posts {upstream}/embeddings asking base64, and orders the vectors by index', async () => {
    const server = await localServer(() =>
      embeddingList([
        { index: 1, embedding: [0.25, 0.5] },
        { index: 0, embedding: [0.10000000149011612, -0.2] },
      ]),
    );
    const result = await embed(server.backend, { input: ['a', 'b'], truncate: true });
    expect(server.embeds()).toEqual([
      expect.objectContaining({
        method: 'POST',
        body: { model: 'BAAI/bge-m3', input: ['a', 'b'], encoding_format: 'base64' },
      }),
    ]);
    expect(result.vectors.map((v) => Array.from(v))).toEqual([
      [Math.fround(0.1), Math.fround(-0.2)],
      [0.25, 0.5],
    ]);
    expect(result.promptTokens).toBe(7);
  });

  void it('sends token ids as they are, and dimensions when the task has them', async () => {
    const server = await localServer(() => embeddingList([{ index: 0, embedding: [1, 0] }], 3));
    await embed(server.backend, { input: [[101, 2023, 102]], dimensions: 2 });
    expect(server.embeds()[0].body).toEqual({
      model: 'BAAI/bge-m3',
      input: [[101, 2023, 102]],
      encoding_format: 'base64',
      dimensions: 2,
    });
  });

  void it('decodes a base64 answer bit for bit, and reports no usage where the server gives none', async () => {
    // float32 bit patterns a decimal round trip could lose or a sign test could miss: 0.1, -0, the
    // smallest subnormal, the largest finite value, and one just above 1.
    const bits = [0x3dcccccd, 0x80000000, 0x00000001, 0x7f7fffff, 0x3f800001];
    const bytes = Buffer.alloc(bits.length * 4);
    bits.forEach((b, i) => bytes.writeUInt32LE(b, i * 4));
    const server = await localServer(() => ({
      status: 200,
      body: {
        object: 'list',
        data: [
          { index: 1, embedding: encodeVector([0.5, -0.5, 1, 2, 3]) },
          { index: 0, embedding: bytes.toString('base64') },
        ],
      },
    }));
    const result = await embed(server.backend, { input: ['a', 'b'] });
    expect(server.embeds()[0].body.encoding_format).toBe('base64');
    const [first, second] = result.vectors;
    expect(Array.from(new Uint32Array(first.buffer, first.byteOffset, first.length))).toEqual(bits);
    expect(Array.from(second)).toEqual([0.5, -0.5, 1, 2, 3]);
    expect(result.promptTokens).toBeNull();
  });

  void it('refuses a base64 vector of partial float32s or of non-finite values, as it refuses such floats', async () => {
    const nan = Buffer.alloc(8);
    nan.writeFloatLE(1, 0);
    nan.writeUInt32LE(0x7fc00000, 4);
    for (const embedding of [Buffer.from([0, 0, 0x80, 0x3f, 1, 2]).toString('base64'), nan.toString('base64')]) {
      const server = await localServer(() => embeddingList([{ index: 0, embedding }]));
      await expect(embed(server.backend, { input: ['a'] })).rejects.toMatchObject({ code: 'upstream_bad_response' });
    }
  });

  void it('refuses an answer whose indices are not 0 to n - 1, each once', async () => {
    const cases = [
      [{ index: 0, embedding: [1] }],
      [
        { index: 0, embedding: [1] },
        { index: 0, embedding: [2] },
      ],
      [
        { index: 0, embedding: [1] },
        { index: 2, embedding: [2] },
      ],
      [
        { index: '1', embedding: [1] },
        { index: 0, embedding: [2] },
      ],
      [
        { index: 0, embedding: [1] },
        { index: 1, embedding: [2] },
        { index: 2, embedding: [3] },
      ],
    ];
    for (const data of cases) {
      const server = await localServer(() => embeddingList(data));
      await expect(embed(server.backend, { input: ['a', 'b'] })).rejects.toMatchObject({
        code: 'upstream_bad_response',
      });
    }
    const server = await localServer(() => ({ status: 200, body: { object: 'list' } }));
    await expect(embed(server.backend, { input: ['a'] })).rejects.toMatchObject({ code: 'upstream_bad_response' });
  });

  void it('maps the servers’ errors as it maps them for chat', async () => {
    const vllm = (status: number, message: string) => ({
      status,
      body: { error: { message, type: 'BadRequestError', param: null, code: status } },
    });
    const cases: [{ status: number; body: unknown }, string][] = [
      [vllm(404, 'The model `BAAI/bge-m3` does not exist.'), 'model_not_found'],
      [
        vllm(
          400,
          "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens in the input for embedding generation. Please reduce the length of the input.",
        ),
        'context_length_exceeded',
      ],
      [
        // llama.cpp's server, for an input over its batch.
        vllm(500, 'input is too large to process. increase the physical batch size'),
        'context_length_exceeded',
      ],
      [
        vllm(
          400,
          'Model "BAAI/bge-m3" does not support matryoshka representation, changing output dimensions will lead to poor results.',
        ),
        'upstream_bad_request',
      ],
      [vllm(401, 'Unauthorized'), 'upstream_unauthorized'],
      [vllm(501, 'This server does not support embeddings. Start it with `--embeddings`'), 'upstream_error'],
    ];
    for (const [reply, code] of cases) {
      const server = await localServer((path) =>
        path === '/v1/embeddings' ? reply : { status: 200, body: { object: 'list', data: [] } },
      );
      await expect(embed(server.backend, { input: ['a'] })).rejects.toMatchObject({ code });
    }
  });

  /** A server that refuses base64 with `refusal` and answers floats, and the log lines of the backend in front of it. */
  const floatOnly = async (refusal: { status: number; body: unknown }) => {
    const logged: { fields: unknown; message: string }[] = [];
    const logger = createLogger('openai-embed-test', 'silent');
    logger.info = ((fields: unknown, message: string) => void logged.push({ fields, message })) as typeof logger.info;
    const server = await localServer(
      (_path, body) =>
        body.encoding_format === 'base64' ? refusal : embeddingList([{ index: 0, embedding: [0.25, -1] }]),
      logger,
    );
    return { ...server, logged, formats: () => server.embeds().map((r) => r.body.encoding_format) };
  };

  void it('falls back to float when the runtime refuses base64, and asks float directly from then on', async () => {
    const refusals = [
      // Older vLLM's top-level error shape (the fake runtime's embedRefusesBase64).
      {
        status: 400,
        body: {
          object: 'error',
          message: "encoding_format 'base64' is not supported",
          type: 'BadRequestError',
          param: null,
          code: 400,
        },
      },
      // vLLM's validation error for a server whose encoding_format is float only.
      {
        status: 400,
        body: {
          error: {
            message:
              "1 validation error for EmbeddingCompletionRequest\nencoding_format\n  Input should be 'float' [type=literal_error, input_value='base64', input_type=str]",
            type: 'Bad Request',
            param: null,
            code: 400,
          },
        },
      },
      // FastAPI's own 422.
      {
        status: 422,
        body: { detail: [{ type: 'literal_error', loc: ['body', 'encoding_format'], msg: "Input should be 'float'" }] },
      },
    ];
    for (const refusal of refusals) {
      const server = await floatOnly(refusal);
      const first = await embed(server.backend, { input: ['a'] });
      expect(Array.from(first.vectors[0])).toEqual([0.25, -1]);
      expect(server.formats()).toEqual(['base64', 'float']);
      await embed(server.backend, { input: ['b'] });
      await embed(server.backend, { input: ['c'] });
      expect(server.formats()).toEqual(['base64', 'float', 'float', 'float']);
      expect(server.embeds()[1].body).toEqual({ ...server.embeds()[0].body, encoding_format: 'float' });
      expect(server.logged).toEqual([
        {
          fields: { upstream: expect.stringMatching(/\/v1\/embeddings$/), status: refusal.status },
          message: expect.stringMatching(/does not take encoding_format "base64"/),
        },
      ]);
    }
  });

  void it('takes a context-length 400 for what it is, not for a refusal of base64', async () => {
    // Even one that echoes the request, encoding_format and all.
    const server = await floatOnly({
      status: 400,
      body: {
        error: {
          message:
            "This model's maximum context length is 512 tokens. However, you requested 900 tokens in the input for embedding generation. Please reduce the length of the input. (request: {'encoding_format': 'base64'})",
          type: 'BadRequestError',
          param: null,
          code: 400,
        },
      },
    });
    await expect(embed(server.backend, { input: ['a'] })).rejects.toMatchObject({ code: 'context_length_exceeded' });
    expect(server.formats()).toEqual(['base64']);
    const other = await floatOnly({
      status: 400,
      body: { error: { message: 'input is too large to process. increase the physical batch size', code: 400 } },
    });
    await expect(embed(other.backend, { input: ['a'] })).rejects.toMatchObject({ code: 'context_length_exceeded' });
    expect(other.formats()).toEqual(['base64']);
  });

  void it('keeps asking base64 when a 400 that names it fails in float too, and reports the float error', async () => {
    // A validation error that echoes the whole request names base64 whatever was wrong.
    const refusal = (body: any) => ({
      status: 400,
      body: {
        error: {
          message: `1 validation error: input_value=${JSON.stringify(body)}, Input should be a valid list`,
          type: 'Bad Request',
          code: 400,
        },
      },
    });
    const server = await localServer((_path, body) => refusal(body));
    await expect(embed(server.backend, { input: ['a'] })).rejects.toMatchObject({
      code: 'upstream_bad_request',
      message: expect.stringContaining('"encoding_format":"float"'),
    });
    await expect(embed(server.backend, { input: ['b'] })).rejects.toMatchObject({ code: 'upstream_bad_request' });
    expect(server.embeds().map((r) => r.body.encoding_format)).toEqual(['base64', 'float', 'base64', 'float']);
  });

  void it('does not retry other refusals (a 400 that does not name the format, a 500 that does)', async () => {
    const cases = [
      {
        status: 400,
        body: { error: { message: 'Model "BAAI/bge-m3" does not support matryoshka representation', code: 400 } },
      },
      { status: 500, body: { error: { message: 'failed to encode the embeddings as base64', code: 500 } } },
      { status: 413, body: { error: { message: 'encoding_format: body too large', code: 413 } } },
    ];
    for (const reply of cases) {
      const server = await floatOnly(reply);
      await expect(embed(server.backend, { input: ['a'] })).rejects.toBeDefined();
      expect(server.formats()).toEqual(['base64']);
    }
  });
});
