import type { ChatParams } from '@app/common/protocol/chat';
import { ollamaChatRequest } from './ollama-chat-request';
import { OllamaChatStream } from './ollama-chat-stream';
import { ollamaFeatures, ollamaIdentity, versionAtLeast } from './ollama.backend';

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
