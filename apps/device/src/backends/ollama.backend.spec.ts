import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { createLogger } from '@app/common/logging/logger';
import type { ChatParams } from '@app/common/protocol/chat';
import { ollamaChatRequest } from './ollama-chat-request';
import { OllamaChatStream } from './ollama-chat-stream';
import { OllamaBackend, ollamaFeatures, ollamaIdentity, versionAtLeast } from './ollama.backend';

const line = (value: unknown) => JSON.stringify(value);
const chunk = (message: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
  line({
    model: 'm',
    created_at: '2025-01-01T00:00:00Z',
    message: { role: 'assistant', ...message },
    done: false,
    ...extra,
  });

void describe('ollamaChatRequest: a resumed task (assistant_prefix)', () => {
  const question: ChatParams['messages'] = [{ role: 'user', content: 'Name three rivers.' }];

  void it('sends the answer so far as the final assistant message, which Ollama continues', () => {
    const body = ollamaChatRequest('m', { messages: question, max_tokens: 20, assistant_prefix: 'The Rhine, the' });
    expect(body.messages).toEqual([...question, { role: 'assistant', content: 'The Rhine, the' }]);
    expect(body.options).toEqual({ num_predict: 20 });
    expect('assistant_prefix' in body).toBe(false);
  });

  void it('joins a trailing assistant message, which Ollama continued the first time', () => {
    const body = ollamaChatRequest('m', {
      messages: [...question, { role: 'assistant', content: 'Sure: ' }],
      max_tokens: 20,
      assistant_prefix: 'the Rhine',
    });
    expect(body.messages).toEqual([...question, { role: 'assistant', content: 'Sure: the Rhine' }]);
  });
});

void describe('ollamaFeatures', () => {
  void it('adds continue from 0.2.8 and logprobs from 0.12.11, neither for an unknown version', () => {
    expect(ollamaFeatures('0.2.7')).not.toContain('continue');
    expect(ollamaFeatures('0.2.8')).toContain('continue');
    expect(ollamaFeatures('0.2.8')).not.toContain('logprobs');
    expect(ollamaFeatures('0.12.11')).toEqual(expect.arrayContaining(['continue', 'logprobs', 'tools']));
    expect(ollamaFeatures(null)).not.toContain('continue');
    expect(ollamaFeatures('0.0.0')).not.toContain('continue');
  });

  void it('adds embeddings from 0.2.6 and embed_dimensions from 0.11.11, never embed_tokens', () => {
    expect(ollamaFeatures('0.2.5')).not.toContain('embeddings');
    expect(ollamaFeatures('0.2.6')).toContain('embeddings');
    expect(ollamaFeatures('0.11.10')).not.toContain('embed_dimensions');
    expect(ollamaFeatures('0.11.11')).toEqual(expect.arrayContaining(['embeddings', 'embed_dimensions']));
    expect(ollamaFeatures('0.12.11')).not.toContain('embed_tokens');
    expect(ollamaFeatures(null)).not.toContain('embeddings');
  });
});

void describe('ollamaChatRequest: web search and stop text', () => {
  void it('passes web_search_options on, and leaves the stop strings to the device when they are kept', () => {
    const params: ChatParams = {
      messages: [{ role: 'user', content: 'news?' }],
      max_tokens: 8,
      stop: ['END'],
      include_stop_str_in_output: true,
      web_search_options: { search_context_size: 'high' },
    };
    const body = ollamaChatRequest('m', params);
    expect(body.web_search_options).toEqual({ search_context_size: 'high' });
    expect(body.options).toEqual({ num_predict: 8 });
    expect(ollamaChatRequest('m', { ...params, include_stop_str_in_output: undefined }).options).toEqual({
      num_predict: 8,
      stop: ['END'],
    });
  });
});

void describe('ollamaChatRequest', () => {
  void it('maps roles, tool calls (arguments as objects) and tool results (with the tool name)', () => {
    const params: ChatParams = {
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Weather in Paris?', name: 'ann' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            { id: 'call_1', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris"}' } },
          ],
        },
        { role: 'tool', content: '21 C', tool_call_id: 'call_1' },
      ],
      max_tokens: 64,
      tools: [
        {
          type: 'function',
          function: { name: 'weather', description: 'd', parameters: { type: 'object' }, strict: true },
        },
      ],
      tool_choice: 'auto',
    };
    expect(ollamaChatRequest('llama3.2:3b', params)).toEqual({
      model: 'llama3.2:3b',
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Weather in Paris?' },
        {
          role: 'assistant',
          content: '',
          tool_calls: [{ function: { name: 'weather', arguments: { city: 'Paris' } } }],
        },
        { role: 'tool', content: '21 C', tool_name: 'weather' },
      ],
      stream: true,
      options: { num_predict: 64 },
      tools: [{ type: 'function', function: { name: 'weather', description: 'd', parameters: { type: 'object' } } }],
    });
  });

  void it('maps sampling options, stop, format and think', () => {
    const base: ChatParams = { messages: [{ role: 'user', content: 'x' }], max_tokens: 10 };
    const body = ollamaChatRequest('m', {
      ...base,
      temperature: 0.2,
      top_p: 0.9,
      stop: ['END'],
      presence_penalty: 0.5,
      frequency_penalty: -0.5,
      response_format: { type: 'json_object' },
      reasoning_effort: 'high',
    });
    expect(body.options).toEqual({
      num_predict: 10,
      temperature: 0.2,
      top_p: 0.9,
      stop: ['END'],
      presence_penalty: 0.5,
      frequency_penalty: -0.5,
    });
    expect(body.format).toBe('json');
    expect(body.think).toBe('high');
    expect(ollamaChatRequest('m', { ...base, reasoning_effort: 'low' }, false).think).toBe(true);
    const schema = { type: 'object', properties: { a: { type: 'string' } } };
    expect(
      ollamaChatRequest('m', { ...base, response_format: { type: 'json_schema', json_schema: { name: 's', schema } } })
        .format,
    ).toEqual(schema);
    expect('think' in ollamaChatRequest('m', base)).toBe(false);
    expect('format' in ollamaChatRequest('m', { ...base, response_format: { type: 'text' } })).toBe(false);
  });

  void it('sends no tools with tool_choice none, and logprobs when asked', () => {
    const base: ChatParams = { messages: [{ role: 'user', content: 'x' }], max_tokens: 10 };
    const tools: ChatParams['tools'] = [{ type: 'function', function: { name: 'f' } }];
    expect('tools' in ollamaChatRequest('m', { ...base, tools, tool_choice: 'none' })).toBe(false);
    const body = ollamaChatRequest('m', { ...base, logprobs: true, top_logprobs: 3 });
    expect(body.logprobs).toBe(true);
    expect(body.top_logprobs).toBe(3);
  });

  void it('refuses tool call arguments that are not a JSON object', () => {
    expect(() =>
      ollamaChatRequest('m', {
        messages: [
          {
            role: 'assistant',
            content: null,
            tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '[1]' } }],
          },
        ],
        max_tokens: 1,
      }),
    ).toThrow(expect.objectContaining({ code: 'invalid_request' }));
  });
});

void describe('OllamaChatStream', () => {
  void it('turns content and thinking into deltas, and the final line into finish reason and usage', () => {
    const stream = new OllamaChatStream(0);
    expect(stream.push(chunk({ content: '', thinking: 'Hmm.' }))).toEqual({ index: 0, reasoning: 'Hmm.' });
    expect(stream.push(chunk({ content: 'Hi' }))).toEqual({ index: 0, content: 'Hi' });
    expect(stream.push(chunk({ content: '' }))).toBeNull();
    expect(stream.done).toBe(false);
    const final = line({
      model: 'm',
      created_at: '2025-01-01T00:00:00Z',
      message: { role: 'assistant', content: '' },
      done: true,
      done_reason: 'length',
      total_duration: 1,
      prompt_eval_count: 7,
      eval_count: 3,
    });
    expect(stream.push(final)).toBeNull();
    expect(stream.done).toBe(true);
    expect(stream.result()).toEqual({
      finish_reasons: ['length'],
      usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 },
    });
  });

  void it('emits tool calls whole with JSON string arguments and finishes with tool_calls', () => {
    const stream = new OllamaChatStream(0);
    const delta = stream.push(chunk({ content: '', tool_calls: [{ function: { name: 'f', arguments: { a: 1 } } }] }));
    if (delta?.tool_calls?.length !== 1) {
      throw new Error(`expected delta?.tool_calls?.length to be 1, got ${String(delta?.tool_calls?.length)}`);
    }
    expect(delta.tool_calls[0].id).toMatch(/^call_[0-9a-f]{24}$/);
    expect(delta.tool_calls[0].function).toEqual({ name: 'f', arguments: '{"a":1}' });
    stream.push(line({ message: { role: 'assistant', content: '' }, done: true, done_reason: 'stop' }));
    expect(stream.result()).toEqual({ finish_reasons: ['tool_calls'], usage: null });
  });

  void it('maps logprobs, with bytes when the runtime leaves them out', () => {
    const stream = new OllamaChatStream(1);
    const delta = stream.push(
      chunk(
        { content: 'Hi' },
        {
          logprobs: [
            {
              token: 'Hi',
              logprob: -0.1,
              top_logprobs: [
                { token: 'Hi', logprob: -0.1 },
                { token: 'Yo', logprob: -2 },
              ],
            },
          ],
        },
      ),
    );
    expect(delta?.logprobs).toEqual([
      {
        token: 'Hi',
        logprob: -0.1,
        bytes: [72, 105],
        top_logprobs: [{ token: 'Hi', logprob: -0.1, bytes: [72, 105] }],
      },
    ]);
  });

  void it('throws upstream errors, malformed lines and a stream cut short', () => {
    expect(() => new OllamaChatStream(0).push('{"message":')).toThrow(
      expect.objectContaining({ code: 'upstream_bad_response' }),
    );
    expect(() => new OllamaChatStream(0).push('[1,2]')).toThrow(
      expect.objectContaining({ code: 'upstream_bad_response' }),
    );
    expect(() =>
      new OllamaChatStream(0).push(line({ error: 'an error was encountered while running the model' })),
    ).toThrow(expect.objectContaining({ code: 'upstream_error' }));
    const cut = new OllamaChatStream(0);
    cut.push(chunk({ content: 'a' }));
    expect(() => cut.result()).toThrow(expect.objectContaining({ code: 'upstream_bad_response' }));
  });
});

void describe('versionAtLeast', () => {
  void it('compares dotted versions, and knows nothing of unknown or dev builds', () => {
    expect(versionAtLeast('0.12.11', [0, 12, 11])).toBe(true);
    expect(versionAtLeast('0.13.0-rc1', [0, 12, 11])).toBe(true);
    expect(versionAtLeast('1.0.0', [0, 12, 11])).toBe(true);
    expect(versionAtLeast('0.12.10', [0, 12, 11])).toBe(false);
    expect(versionAtLeast('0.9.99', [0, 12, 11])).toBe(false);
    expect(versionAtLeast('0.0.0', [0, 12, 11])).toBe(false);
    expect(versionAtLeast(null, [0, 12, 11])).toBe(false);
    expect(versionAtLeast('dev', [0, 12, 11])).toBe(false);
  });
});

void describe('ollamaIdentity', () => {
  const hex = 'a80c4f17acd55265feec403c7aef86be0c25983ab279d83f3bcd3abbcb5b8b72';

  void it('reads the digest and the details of an /api/tags entry', () => {
    expect(
      ollamaIdentity({
        name: 'llama3.2:latest',
        digest: hex,
        details: { format: 'gguf', family: 'llama', parameter_size: '3.2B', quantization_level: 'Q4_K_M' },
      } as never),
    ).toEqual({
      digest: `sha256:${hex}`,
      family: 'llama',
      parameter_size: '3.2B',
      quantization: 'Q4_K_M',
      root: null,
      context_length: null,
    });
    // Prefixed or in capitals, it is the same digest.
    expect(ollamaIdentity({ digest: `sha256:${hex.toUpperCase()}` }).digest).toBe(`sha256:${hex}`);
  });

  void it('says nothing of what it cannot read', () => {
    for (const digest of [undefined, 42, '', 'abc', `${hex}0`, `sha512:${hex}`]) {
      expect(ollamaIdentity({ digest }).digest).toBeNull();
    }
    expect(ollamaIdentity({ digest: hex, details: { family: 7, parameter_size: 'x'.repeat(33) } })).toEqual({
      digest: `sha256:${hex}`,
      family: null,
      parameter_size: null,
      quantization: null,
      root: null,
      context_length: null,
    });
  });
});

/** A local Ollama that answers each request as `answer` says (after `delayMs`), and records them. */
async function localOllama(answer: (path: string, body: any) => { status: number; body: unknown; delayMs?: number }) {
  const requests: { method: string; path: string; headers: http.IncomingHttpHeaders; body: any }[] = [];
  const closed: string[] = [];
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
      res.on('close', () => closed.push(request.path));
      const reply = answer(request.path, request.body);
      const timer = setTimeout(() => {
        const payload = typeof reply.body === 'string' ? reply.body : JSON.stringify(reply.body);
        res.writeHead(reply.status, { 'content-type': 'application/json; charset=utf-8' }).end(payload);
      }, reply.delayMs ?? 0);
      res.on('close', () => clearTimeout(timer));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const backend = new OllamaBackend(
    {
      upstream: url,
      models: [{ public: 'nomic', upstream: 'nomic-embed-text:latest' }],
      apiKey: 'secret-key',
      discoveryIntervalMs: 60_000,
      healthIntervalMs: 60_000,
    },
    createLogger('ollama-embed-test', 'silent'),
  );
  cleanups.push(async () => {
    backend.stop();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });
  return { backend, requests, closed, embeds: () => requests.filter((r) => r.path === '/api/embed') };
}

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) {
    await cleanup();
  }
});

void describe('OllamaBackend.embed', () => {
  const answer = (embeddings: unknown, extra: Record<string, unknown> = {}) => ({
    status: 200,
    body: { model: 'nomic-embed-text:latest', embeddings, total_duration: 1, load_duration: 1, ...extra },
  });

  void it('posts /api/embed under the runtime’s name, and gives the vectors as float32 with the prompt’s tokens', async () => {
    const ollama = await localOllama(() =>
      answer(
        [
          [0.1, -0.2, 0.3],
          [1e-8, 0.5, -0.25],
        ],
        { prompt_eval_count: 9 },
      ),
    );
    const result = await ollama.backend.embed(
      { model: 'nomic', params: { input: ['first text', 'second'], truncate: false } },
      new AbortController().signal,
    );
    expect(ollama.embeds()).toEqual([
      expect.objectContaining({
        method: 'POST',
        body: { model: 'nomic-embed-text:latest', input: ['first text', 'second'], truncate: false },
      }),
    ]);
    expect(ollama.embeds()[0].headers.authorization).toBe('Bearer secret-key');
    expect(result.promptTokens).toBe(9);
    expect(result.vectors.map((v) => Array.from(v))).toEqual([
      [0.1, -0.2, 0.3].map(Math.fround),
      [1e-8, 0.5, -0.25].map(Math.fround),
    ]);
  });

  void it('reports no usage from an Ollama that gives no count (before 0.3.3, or 0)', async () => {
    const ollama = await localOllama(() => answer([[0.5, 0.5]]));
    const result = await ollama.backend.embed(
      { model: 'nomic', params: { input: ['x'] } },
      new AbortController().signal,
    );
    expect(result.promptTokens).toBeNull();
  });

  void it('sends dimensions, and refuses an answer that ignored them', async () => {
    const ollama = await localOllama(() => answer([[0.6, 0.8, 0]]));
    await expect(
      ollama.backend.embed({ model: 'nomic', params: { input: ['x'], dimensions: 2 } }, new AbortController().signal),
    ).rejects.toMatchObject({ code: 'upstream_bad_response' });
    expect(ollama.embeds()[0].body).toEqual({ model: 'nomic-embed-text:latest', input: ['x'], dimensions: 2 });
  });

  void it('maps Ollama’s errors as it maps them for chat', async () => {
    const cases: [number, string, string][] = [
      [404, "model 'nomic-embed-text:latest' not found", 'model_not_found'],
      [400, 'the input length exceeds the context length', 'context_length_exceeded'],
      [400, 'input length exceeds maximum context length', 'context_length_exceeded'],
      [400, 'invalid input type', 'upstream_bad_request'],
      [500, 'llama runner process has terminated: exit status 2', 'upstream_error'],
    ];
    for (const [status, error, code] of cases) {
      const ollama = await localOllama((path) =>
        path === '/api/embed' ? { status, body: { error } } : { status: 200, body: { models: [] } },
      );
      await expect(
        ollama.backend.embed({ model: 'nomic', params: { input: ['x'] } }, new AbortController().signal),
      ).rejects.toMatchObject({ code, message: expect.stringContaining(error) });
    }
  });

  void it('refuses an answer that is not Ollama’s', async () => {
    for (const body of [{ embedding: [1, 2] }, { embeddings: [[1], [2]] }, 'not json']) {
      const ollama = await localOllama(() => ({ status: 200, body }));
      await expect(
        ollama.backend.embed({ model: 'nomic', params: { input: ['x'] } }, new AbortController().signal),
      ).rejects.toMatchObject({ code: 'upstream_bad_response' });
    }
  });

  void it('closes the request when cancelled, which stops Ollama', async () => {
    const ollama = await localOllama(() => ({ ...answer([[1]]), delayMs: 10_000 }));
    const controller = new AbortController();
    const running = ollama.backend.embed({ model: 'nomic', params: { input: ['x'] } }, controller.signal);
    while (ollama.embeds().length === 0) {
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    controller.abort();
    await expect(running).rejects.toMatchObject({ code: 'cancelled' });
    while (!ollama.closed.includes('/api/embed')) {
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  });

  void it('refuses token inputs, which Ollama cannot take', async () => {
    const ollama = await localOllama(() => answer([[1]]));
    await expect(
      ollama.backend.embed({ model: 'nomic', params: { input: [[1, 2]] } }, new AbortController().signal),
    ).rejects.toMatchObject({ code: 'invalid_request' });
    expect(ollama.embeds()).toEqual([]);
  });
});
