import type { ChatParams, ChoiceDelta } from '@app/common/protocol/chat';
import { FEATURES } from '@app/common/protocol/chat';
import type { BackendResult } from './backend';
import { tokenizeText } from './sim-generation';
import { SimBackend } from './sim.backend';

// No pacing: these tests check what is emitted, never when.
const sim = new SimBackend({
  models: ['sim-model'],
  ttftMs: 0,
  tokensPerSecond: 0,
  tokens: 24,
  features: [...FEATURES],
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
  /** The content deltas, one piece each, in order. */
  pieces: ChoiceDelta[];
  text: string;
  reasoning: string;
  result: BackendResult;
}

async function run(p: ChatParams): Promise<Run> {
  const deltas: ChoiceDelta[] = [];
  const result = await sim.run(
    { model: 'sim-model', params: p },
    { delta: (c) => deltas.push(...c) },
    new AbortController().signal,
  );
  const pieces = deltas.filter((d) => d.content !== undefined);
  return {
    pieces,
    text: pieces.map((d) => d.content).join(''),
    reasoning: deltas.map((d) => d.reasoning ?? '').join(''),
    result,
  };
}

/** Resumes `whole` after each of its first k pieces, as the dispatcher would: max_tokens less the k relayed tokens. */
async function everySplit(request: ChatParams, check: (whole: Run, k: number, rest: Run) => void): Promise<number> {
  const whole = await run(request);
  let splits = 0;
  for (let k = 1; k <= whole.pieces.length && request.max_tokens - k >= 1; k++) {
    const prefix = whole.pieces
      .slice(0, k)
      .map((d) => d.content)
      .join('');
    const rest = await run({ ...request, max_tokens: request.max_tokens - k, assistant_prefix: prefix });
    expect(prefix + rest.text).toBe(whole.text);
    expect(rest.result.finish_reasons).toEqual(whole.result.finish_reasons);
    check(whole, k, rest);
    splits++;
  }
  return splits;
}

void describe('SimBackend: continuing a reply (assistant_prefix)', () => {
  void it.each([
    ['a plain reply that ends with stop', params()],
    ['a reply cut by max_tokens (length)', params({ max_tokens: 10 })],
    ['a reply that fits max_tokens exactly', params({ max_tokens: 24 })],
    ['another conversation', params({ messages: [{ role: 'user', content: 'Something else entirely.' }] })],
    ['a JSON object', params({ response_format: { type: 'json_object' } })],
  ])('continues %s exactly where the uninterrupted reply goes on, at every split', async (_, request) => {
    const splits = await everySplit(request, (whole, k, rest) => {
      expect(rest.result.usage).toEqual({
        prompt_tokens: whole.result.usage!.prompt_tokens + k,
        completion_tokens: rest.pieces.length,
        total_tokens: whole.result.usage!.prompt_tokens + k + rest.pieces.length,
      });
      expect(k + rest.result.usage!.completion_tokens).toBe(whole.result.usage!.completion_tokens);
    });
    expect(splits).toBeGreaterThan(5);
  });

  void it('ends a cut reply with length once the original max_tokens is spent', async () => {
    const whole = await run(params({ max_tokens: 10 }));
    expect(whole.result.finish_reasons).toEqual(['length']);
    const rest = await run(
      params({
        max_tokens: 3,
        assistant_prefix: whole.pieces
          .slice(0, 7)
          .map((d) => d.content)
          .join(''),
      }),
    );
    expect(rest.pieces.map((d) => d.content)).toEqual(whole.pieces.slice(7).map((d) => d.content));
    expect(rest.result.finish_reasons).toEqual(['length']);
  });

  void it('cuts at the same stop string, and keeps the same logprobs', async () => {
    const full = (await run(params())).text;
    const stop = ` ${full.split(' ')[15]}`;
    await everySplit(params({ stop: [stop] }), (whole) => expect(whole.text).toBe(full.slice(0, full.indexOf(stop))));
    await everySplit(params({ logprobs: true, top_logprobs: 2 }), (whole, k, rest) =>
      expect(rest.pieces.map((d) => d.logprobs)).toEqual(whole.pieces.slice(k).map((d) => d.logprobs)),
    );
  });

  void it('does not reason again: the rest of the content follows the prefix', async () => {
    await everySplit(params({ reasoning_effort: 'low', max_tokens: 12 }), (whole, k, rest) => {
      expect(whole.reasoning).not.toBe('');
      expect(rest.reasoning).toBe('');
      expect(k + rest.pieces.length).toBe(whole.pieces.length);
    });
  });

  void it("continues someone else's text deterministically, from a seed that includes it", async () => {
    const whole = await run(params());
    const foreign = 'The yard is quiet at night';
    const a = await run(params({ assistant_prefix: foreign }));
    const b = await run(params({ assistant_prefix: foreign }));
    expect(a).toEqual(b);
    expect(a.text).toMatch(/^ \S/);
    expect(a.text).not.toBe(whole.text);
    expect(a.result.finish_reasons).toEqual(['stop']);
    expect(a.result.usage?.prompt_tokens).toBe(whole.result.usage!.prompt_tokens + tokenizeText(foreign).length);
    expect((await run(params({ assistant_prefix: `${foreign}!` }))).text).not.toBe(a.text);

    // The sim's own reply split inside a token is not its reply at a token boundary.
    const inside = whole.text.slice(0, whole.pieces[0].content!.length - 1);
    const midWord = await run(params({ assistant_prefix: inside }));
    expect(inside + midWord.text).not.toBe(whole.text);
    expect(midWord.text).toMatch(/^ \S/);

    const short = await run(params({ assistant_prefix: foreign, max_tokens: 2 }));
    expect(short.pieces).toHaveLength(2);
    expect(short.result.finish_reasons).toEqual(['length']);
  });
});
