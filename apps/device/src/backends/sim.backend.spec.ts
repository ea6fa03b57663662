import type { ChatParams, ChoiceDelta } from '@app/common/protocol/chat';
import { FEATURES } from '@app/common/protocol/chat';
import type { EmbedParams } from '@app/common/protocol/embeddings';
import type { BackendResult } from './backend';
import type { SimOptions } from './sim.backend';
import { simEmbedding } from './sim-embedding';
import { tokenizeText } from './sim-generation';
import { SIM_DEFAULTS, SimBackend } from './sim.backend';

// No pacing: these tests check what is emitted, never when.
const fast = (overrides: Partial<SimOptions> = {}) =>
  new SimBackend({
    models: ['sim-model'],
    ttftMs: 0,
    tokensPerSecond: 0,
    tokens: 24,
    features: [...FEATURES],
    ...overrides,
  });

const params = (overrides: Partial<ChatParams> = {}): ChatParams => ({
  messages: [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: 'Tell me about the rail yard.' },
  ],
  max_tokens: 512,
  ...overrides,
});

interface Run {
  deltas: ChoiceDelta[][];
  result: BackendResult;
  /** Concatenated content per choice index. */
  content: string[];
}

async function run(backend: SimBackend, p: ChatParams, signal = new AbortController().signal): Promise<Run> {
  const deltas: ChoiceDelta[][] = [];
  const result = await backend.run({ model: 'sim-model', params: p }, { delta: (c) => deltas.push(c) }, signal);
  const content: string[] = [];
  for (const choice of deltas.flat()) {
    content[choice.index] = (content[choice.index] ?? '') + (choice.content ?? '');
  }
  return { deltas, result, content };
}

void describe('SimBackend', () => {
  void it('replies deterministically, from the conversation', async () => {
    const a = await run(fast(), params());
    const b = await run(fast(), params());
    expect(a.deltas).toEqual(b.deltas);
    expect(a.result).toEqual(b.result);
    expect(a.content[0].split(' ')).toHaveLength(24);
    expect(a.result.finish_reasons[0]).toBe('stop');

    const other = await run(fast(), params({ messages: [{ role: 'user', content: 'Something else entirely.' }] }));
    expect(other.content[0]).not.toBe(a.content[0]);
  });

  void it('emits one word per delta, with a leading space after the first', async () => {
    const { deltas } = await run(fast(), params());
    expect(deltas).toHaveLength(24);
    deltas.forEach((d, i) => {
      expect(d).toHaveLength(1);
      const text = d[0].content ?? '';
      expect(text).toMatch(i === 0 ? /^\S+$/ : /^ \S+$/);
    });
  });

  void it('counts prompt words and emitted tokens in usage', async () => {
    const { result } = await run(fast(), params());
    // "You are terse." (3) + "Tell me about the rail yard." (6)
    expect(result.usage).toEqual({ prompt_tokens: 9, completion_tokens: 24, total_tokens: 33 });
  });

  void it('reports no usage without the stream_usage feature', async () => {
    const { result } = await run(fast({ features: ['tools'] }), params());
    expect(result.usage).toBeNull();
  });

  void it('stops at max_tokens with finish_reason length', async () => {
    const full = await run(fast(), params());
    const cut = await run(fast(), params({ max_tokens: 5 }));
    expect(cut.deltas).toHaveLength(5);
    expect(cut.result.finish_reasons).toEqual(['length']);
    expect(cut.result.usage?.completion_tokens).toBe(5);
    expect(full.content[0].startsWith(cut.content[0])).toBe(true);
  });

  void it('finishes with stop when the reply fits max_tokens exactly', async () => {
    const { result } = await run(fast(), params({ max_tokens: 24 }));
    expect(result.finish_reasons).toEqual(['stop']);
  });

  void it('truncates before the first stop string', async () => {
    const full = (await run(fast(), params())).content[0];
    const words = full.split(' ');
    // A stop string that begins inside a word, so the last emitted piece is a partial token.
    const stop = words[6].slice(2) + ' ' + words[7];
    const at = full.indexOf(stop);
    expect(at).toBeGreaterThan(0);
    const { content, result } = await run(fast(), params({ stop: ['never-appears', stop] }));
    expect(content[0]).toBe(full.slice(0, at));
    expect(content[0]).not.toContain(stop);
    expect(result.finish_reasons).toEqual(['stop']);
  });

  void it('keeps the stop string at the end with include_stop_str_in_output', async () => {
    const full = (await run(fast(), params())).content[0];
    const words = full.split(' ');
    const stop = words[6].slice(2) + ' ' + words[7];
    const at = full.indexOf(stop);
    const { content, result } = await run(fast(), params({ stop: [stop], include_stop_str_in_output: true }));
    expect(content[0]).toBe(full.slice(0, at + stop.length));
    expect(content[0].endsWith(stop)).toBe(true);
    expect(result.finish_reasons).toEqual(['stop']);
  });

  void it('counts the tokens of every choice in completion_tokens with n > 1', async () => {
    const { deltas, result } = await run(fast({ tokens: 5 }), params({ n: 2 }));
    const pieces = deltas.flat().filter((d) => d.content !== undefined).length;
    expect(pieces).toBe(10);
    expect(result.usage?.completion_tokens).toBe(10);
  });

  void it('reports length when the stop string lies beyond max_tokens', async () => {
    const full = (await run(fast(), params())).content[0];
    const words = full.split(' ');
    const stop = ` ${words[19]} ${words[20]}`;
    expect(full.indexOf(stop)).toBeGreaterThanOrEqual(words.slice(0, 3).join(' ').length);
    const { result, deltas } = await run(fast(), params({ stop: [stop], max_tokens: 3 }));
    expect(result.finish_reasons).toEqual(['length']);
    expect(deltas).toHaveLength(3);
  });

  void it('generates n choices, each with its own seed and finish reason', async () => {
    const { deltas, result, content } = await run(fast(), params({ n: 3 }));
    expect(result.finish_reasons).toHaveLength(3);
    expect([...new Set(deltas.flat().map((c) => c.index))].sort()).toEqual([0, 1, 2]);
    expect(new Set(content).size).toBe(3);
    expect(result.usage?.completion_tokens).toBe(72);
    // Choice 0 of n=3 is the same reply as the single choice.
    expect(content[0]).toBe((await run(fast(), params())).content[0]);
  });

  void it('calls the first tool once, whole, with JSON arguments', async () => {
    const tools: ChatParams['tools'] = [
      {
        type: 'function',
        function: {
          name: 'get_weather',
          parameters: {
            type: 'object',
            properties: {
              city: { type: 'string' },
              unit: { type: 'string', enum: ['c', 'f'] },
              days: { type: 'integer', minimum: 1, maximum: 7 },
            },
            required: ['city'],
          },
        },
      },
      { type: 'function', function: { name: 'other_tool' } },
    ];
    const a = await run(fast(), params({ tools, tool_choice: 'auto' }));
    const b = await run(fast(), params({ tools }));
    expect(a.deltas).toEqual(b.deltas);
    const calls = a.deltas.flat().flatMap((c) => c.tool_calls ?? []);
    expect(calls).toHaveLength(1);
    expect(a.content[0] ?? '').toBe('');
    expect(calls[0].id).toMatch(/^call_[0-9a-f]{24}$/);
    expect(calls[0].type).toBe('function');
    expect(calls[0].function.name).toBe('get_weather');
    const args = JSON.parse(calls[0].function.arguments) as Record<string, unknown>;
    expect(typeof args.city).toBe('string');
    expect(args.unit === 'c' || args.unit === 'f').toBe(true);
    expect(Number.isInteger(args.days)).toBe(true);
    expect(args.days as number).toBeGreaterThanOrEqual(1);
    expect(args.days as number).toBeLessThanOrEqual(7);
    expect(a.result.finish_reasons).toEqual(['tool_calls']);
    expect(a.result.usage?.completion_tokens ?? 0).toBeGreaterThan(0);
  });

  void it('answers in words with tool_choice none, or after a tool result', async () => {
    const tools: ChatParams['tools'] = [{ type: 'function', function: { name: 'lookup' } }];
    const none = await run(fast(), params({ tools, tool_choice: 'none' }));
    expect(none.result.finish_reasons).toEqual(['stop']);
    expect(none.content[0].length).toBeGreaterThan(0);

    const afterTool = await run(
      fast(),
      params({
        tools,
        messages: [
          { role: 'user', content: 'look it up' },
          {
            role: 'assistant',
            content: null,
            tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'lookup', arguments: '{}' } }],
          },
          { role: 'tool', content: '42', tool_call_id: 'call_1' },
        ],
      }),
    );
    expect(afterTool.result.finish_reasons).toEqual(['stop']);
    const toolArgs = (await run(fast(), params({ tools }))).deltas.flat().find((c) => c.tool_calls)?.tool_calls?.[0];
    expect(toolArgs?.function.arguments).toBe('{}');
  });

  void it('emits a valid JSON object for json_object, in several pieces', async () => {
    const { content, deltas, result } = await run(fast(), params({ response_format: { type: 'json_object' } }));
    expect(deltas.length).toBeGreaterThan(3);
    const value = JSON.parse(content[0]) as unknown;
    expect(typeof value).toBe('object');
    expect(typeof (value as { reply?: unknown }).reply).toBe('string');
    expect(result.finish_reasons).toEqual(['stop']);
  });

  void it('follows the schema for json_schema', async () => {
    const schema = {
      type: 'object',
      properties: {
        title: { type: 'string' },
        score: { type: 'number', minimum: 0, maximum: 1 },
        tags: { type: 'array', items: { type: 'string' } },
        done: { type: 'boolean' },
        note: { type: ['string', 'null'] },
      },
      required: ['title', 'score', 'tags', 'done', 'note'],
      additionalProperties: false,
    };
    const { content } = await run(
      fast(),
      params({ response_format: { type: 'json_schema', json_schema: { name: 'card', schema, strict: true } } }),
    );
    const value = JSON.parse(content[0]) as Record<string, unknown>;
    expect(Object.keys(value)).toEqual(['title', 'score', 'tags', 'done', 'note']);
    expect(typeof value.title).toBe('string');
    expect(typeof value.score === 'number' && value.score >= 0).toBe(true);
    expect(value.score).toBeLessThanOrEqual(1);
    expect(Array.isArray(value.tags) && value.tags.every((t) => typeof t === 'string')).toBe(true);
    expect(typeof value.done).toBe('boolean');
    expect(typeof value.note).toBe('string');
  });

  void it('attaches logprobs with the requested number of alternatives', async () => {
    const plain = await run(fast(), params());
    const { deltas } = await run(fast(), params({ logprobs: true, top_logprobs: 5 }));
    expect(deltas).toHaveLength(plain.deltas.length);
    for (const [choice] of deltas) {
      if (!choice.logprobs) {
        throw new Error('expected choice.logprobs');
      }
      expect(choice.logprobs).toHaveLength(1);
      const [lp] = choice.logprobs;
      expect(lp.token).toBe(choice.content);
      expect(lp.logprob).toBeLessThanOrEqual(0);
      expect(lp.bytes).toEqual([...Buffer.from(lp.token, 'utf8')]);
      expect(lp.top_logprobs).toHaveLength(5);
      expect(new Set(lp.top_logprobs.map((t) => t.token)).size).toBe(5);
      for (let i = 1; i < lp.top_logprobs.length; i++) {
        expect(lp.top_logprobs[i].logprob).toBeLessThanOrEqual(lp.top_logprobs[i - 1].logprob);
      }
      expect(lp.top_logprobs.every((t) => t.logprob <= 0)).toBe(true);
    }
    // Asking for logprobs does not change the reply.
    expect(deltas.map(([c]) => c.content)).toEqual(plain.deltas.map(([c]) => c.content));
    const zero = await run(fast(), params({ logprobs: true }));
    expect(zero.deltas.every(([c]) => c.logprobs?.[0].top_logprobs.length === 0)).toBe(true);
  });

  void it('reasons before it answers when reasoning_effort is set', async () => {
    const { deltas, content } = await run(fast(), params({ reasoning_effort: 'low' }));
    const kinds = deltas.map(([c]) => (c.reasoning !== undefined ? 'r' : 'c')).join('');
    expect(kinds).toMatch(/^r+c+$/);
    expect(content[0]).toBe((await run(fast(), params())).content[0]);
  });

  void it('stops at once and rejects with code cancelled when aborted', async () => {
    // Paced so that the run is still going when the first delta arrives.
    const backend = fast({ tokensPerSecond: 50, tokens: 1000 });
    const controller = new AbortController();
    const deltas: ChoiceDelta[][] = [];
    let afterAbort = 0;
    const running = backend.run(
      { model: 'sim-model', params: params({ max_tokens: 2000 }) },
      {
        delta: (c) => {
          if (controller.signal.aborted) {
            afterAbort++;
          }
          deltas.push(c);
          if (deltas.length === 2) {
            controller.abort();
          }
        },
      },
      controller.signal,
    );
    await expect(running).rejects.toMatchObject({ code: 'cancelled', name: 'AbortError' });
    expect(afterAbort).toBe(0);
    expect(deltas).toHaveLength(2);

    const aborted = new AbortController();
    aborted.abort();
    await expect(
      backend.run(
        { model: 'sim-model', params: params() },
        {
          delta: () => {
            throw new Error('no delta');
          },
        },
        aborted.signal,
      ),
    ).rejects.toMatchObject({ code: 'cancelled' });
  });

  void it('rejects while waiting for the first token', async () => {
    const backend = fast({ ttftMs: 60_000 });
    const controller = new AbortController();
    const running = backend.run(
      { model: 'sim-model', params: params() },
      {
        delta: () => {
          throw new Error('no delta');
        },
      },
      controller.signal,
    );
    setImmediate(() => controller.abort());
    await expect(running).rejects.toMatchObject({ code: 'cancelled' });
  });

  void it('splits text into pieces that join back to it', () => {
    for (const text of ['{"reply":"Relay the signal."}', 'a  b', ' lead', 'trail ', 'ünï cödé, ok']) {
      expect(tokenizeText(text).join('')).toBe(text);
    }
  });
});

void describe('SimBackend.embed', () => {
  const embed = (backend: SimBackend, p: EmbedParams, signal = new AbortController().signal) =>
    backend.embed({ model: 'sim-model', params: p }, signal);
  const norm = (v: Float32Array) => Math.sqrt(v.reduce((sum, x) => sum + x * x, 0));

  void it('gives every input a deterministic unit vector of the configured length', async () => {
    const input = ['The rail yard at dawn.', 'A quiet signal box.', 'The rail yard at dawn.'];
    const { vectors } = await embed(fast({ embeddingDimensions: 384 }), { input });
    expect(vectors).toHaveLength(3);
    for (const v of vectors) {
      expect(v).toBeInstanceOf(Float32Array);
      expect(v).toHaveLength(384);
      expect(Math.abs(norm(v) - 1)).toBeLessThan(1e-6);
    }
    // The same text, the same vector, bit for bit; another text, a nearly orthogonal one.
    expect(vectors[2]).toEqual(vectors[0]);
    expect((await embed(fast({ embeddingDimensions: 384 }), { input: [input[0]] })).vectors[0]).toEqual(vectors[0]);
    const cosine = vectors[0].reduce((sum, x, i) => sum + x * vectors[1][i], 0);
    expect(Math.abs(cosine)).toBeLessThan(0.3);
    expect((await embed(fast(), { input: ['x'] })).vectors[0]).toHaveLength(SIM_DEFAULTS.embeddingDimensions);
  });

  void it('keeps its vectors from one version to the next (a benchmark or a test may have stored them)', () => {
    expect(Array.from(simEmbedding('hello', 4))).toEqual([
      -0.23463183641433716, 0.5446281433105469, -0.4798421561717987, 0.6465907692909241,
    ]);
    expect(Array.from(simEmbedding([1, 2, 3], 3))).toEqual([
      -0.1890256702899933, -0.801563024520874, -0.5672441720962524,
    ]);
  });

  void it('shortens vectors matryoshka-style: the first k values of the full vector, normalised again', async () => {
    const text = 'Switch the freight to track four.';
    const full = (await embed(fast(), { input: [text] })).vectors[0];
    const short = (await embed(fast(), { input: [text], dimensions: 64 })).vectors[0];
    expect(short).toHaveLength(64);
    expect(Math.abs(norm(short) - 1)).toBeLessThan(1e-6);
    const head = full.slice(0, 64);
    const headNorm = norm(head);
    head.forEach((x, i) => expect(Math.abs(x / headNorm - short[i])).toBeLessThan(1e-6));
    expect(short).toEqual(simEmbedding(text, 64));
  });

  void it('refuses more dimensions than its vectors have, as OpenAI does', async () => {
    await expect(embed(fast({ embeddingDimensions: 32 }), { input: ['x'], dimensions: 33 })).rejects.toMatchObject({
      code: 'upstream_bad_request',
    });
  });

  void it('embeds token ids, apart from any text', async () => {
    const { vectors, promptTokens } = await embed(fast(), { input: [[1, 2], [3], [1, 2]] });
    expect(vectors[0]).toEqual(vectors[2]);
    expect(vectors[0]).not.toEqual(vectors[1]);
    expect(vectors[0]).not.toEqual((await embed(fast(), { input: ['1,2'] })).vectors[0]);
    expect(promptTokens).toBe(5);
  });

  void it('counts the inputs’ words as prompt tokens, and none without stream_usage', async () => {
    const input = ['one two three', 'four  five'];
    expect((await embed(fast(), { input })).promptTokens).toBe(5);
    expect((await embed(fast({ features: ['embeddings'] }), { input })).promptTokens).toBeNull();
  });

  void it('declares embeddings with token inputs and dimensions by default', () => {
    expect(fast({ features: [...SIM_DEFAULTS.features] }).features).toEqual(
      expect.arrayContaining(['embeddings', 'embed_tokens', 'embed_dimensions']),
    );
  });

  void it('waits ttftMs, and rejects at once when cancelled', async () => {
    const backend = fast({ ttftMs: 60_000 });
    const controller = new AbortController();
    const running = embed(backend, { input: ['x'] }, controller.signal);
    setImmediate(() => controller.abort());
    await expect(running).rejects.toMatchObject({ code: 'cancelled' });
    await expect(embed(fast(), { input: ['x'] }, AbortSignal.abort())).rejects.toMatchObject({ code: 'cancelled' });
  });

  void it('hands the event loop back within a large task, so that a cancel gets through', async () => {
    const controller = new AbortController();
    const input = Array.from({ length: 2048 }, (_, i) => `input ${i}`);
    const running = embed(fast({ embeddingDimensions: 4096 }), { input }, controller.signal);
    setImmediate(() => controller.abort());
    await expect(running).rejects.toMatchObject({ code: 'cancelled' });
  });
});
