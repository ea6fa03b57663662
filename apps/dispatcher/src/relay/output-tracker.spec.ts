import { createHash } from 'node:crypto';
import type { ChatParams } from '@app/common';
import { OutputTracker, outputBound } from './output-tracker';

const params = (extra: Partial<ChatParams> = {}): ChatParams => ({
  messages: [{ role: 'user', content: 'hi' }],
  max_tokens: 100,
  ...extra,
});

describe('OutputTracker', () => {
  it('passes an honest answer of max_tokens one-token pieces, with its logprobs', () => {
    const plain = OutputTracker.forRequest(params());
    for (let i = 0; i < 100; i++) {
      expect(plain.output([{ index: 0, content: ' word' }])).toBe(true);
    }
    const withLogprobs = OutputTracker.forRequest(params({ logprobs: true, top_logprobs: 20 }));
    const top = Array.from({ length: 20 }, (_, i) => ({ token: ` alt${i}`, logprob: -1.234567, bytes: [32, 97] }));
    for (let i = 0; i < 100; i++) {
      const logprobs = [{ token: ' word', logprob: -0.5, bytes: [32, 119, 111, 114, 100], top_logprobs: top }];
      expect(withLogprobs.output([{ index: 0, content: ' word', logprobs }])).toBe(true);
    }
  });

  it('a whole tool call in one piece passes, however long its arguments', () => {
    const tracker = OutputTracker.forRequest(params({ max_tokens: 5 }));
    const call = {
      index: 0,
      id: 'c1',
      type: 'function' as const,
      function: { name: 'f', arguments: 'a'.repeat(8_000) },
    };
    expect(tracker.output([{ index: 0, tool_calls: [call] }])).toBe(true);
  });

  it('refuses the pieces past max_tokens × n with its tolerance, and counts none of them', () => {
    const tracker = OutputTracker.forRequest(params({ max_tokens: 5, n: 2 }));
    const limit = outputBound({ max_tokens: 5, n: 2 }).tokens;
    expect(limit).toBeGreaterThanOrEqual(10);
    for (let i = 0; i < limit; i++) {
      expect(tracker.output([{ index: i % 2, content: 'a' }])).toBe(true);
    }
    const sha = tracker.sha256;
    expect(tracker.output([{ index: 0, content: 'a' }])).toBe(false);
    expect([tracker.tokens, tracker.deltas, tracker.sha256]).toEqual([limit, limit, sha]);
  });

  it('refuses a few huge pieces on their bytes, and a flood of empty pieces on theirs', () => {
    const big = OutputTracker.forRequest(params({ max_tokens: 5 }));
    expect(big.output([{ index: 0, content: 'x'.repeat(100_000) }])).toBe(false);
    expect(big.bytes).toBe(0);

    const empty = OutputTracker.forRequest(params({ max_tokens: 5 }));
    let passed = 0;
    while (empty.output([{ index: 0, content: '' }])) {
      passed++;
    }
    expect(empty.tokens).toBe(0);
    expect(empty.wireBytes).toBeLessThanOrEqual(empty.limit.bytes);
    expect(passed).toBeLessThan(1_000);
  });

  it('counts a piece with logprobs as one token per entry', () => {
    const tracker = OutputTracker.forRequest(params({ max_tokens: 5, logprobs: true }));
    const entry = { token: 'a', logprob: -1, bytes: [97], top_logprobs: [] };
    expect(tracker.output([{ index: 0, content: 'aaaa', logprobs: [entry, entry, entry, entry] }])).toBe(true);
    expect(tracker.tokens).toBe(4);
  });

  it('counts each choice apart, and tells text-only output from what another device cannot continue', () => {
    const tracker = OutputTracker.forRequest(params({ max_tokens: 10, n: 3 }));
    tracker.output([
      { index: 0, content: 'a' },
      { index: 2, content: 'b' },
    ]);
    tracker.output([{ index: 0, content: 'c' }]);
    expect(Array.from(tracker.choiceTokens, (t) => t ?? 0)).toEqual([2, 0, 1]);
    expect(tracker.tokens).toBe(3);
    expect(tracker.textOnly).toBe(false);

    const resumable = OutputTracker.forRequest(params({ max_tokens: 10 }));
    resumable.output([{ index: 0, content: 'a' }]);
    expect(resumable.textOnly).toBe(true);
    resumable.output([{ index: 0, reasoning: 'hmm' }]);
    expect(resumable.textOnly).toBe(false);
  });

  it("a resumed task's tracker hashes the whole answer, and its own output apart", () => {
    const tracker = OutputTracker.forRequest(params({ max_tokens: 10, assistant_prefix: 'Hel' }));
    tracker.output([{ index: 0, content: 'lo' }]);
    const sha = (text: string) => createHash('sha256').update(text).digest('hex');
    expect(tracker.sha256).toBe(sha('Hello'));
    expect(tracker.segmentSha256).toBe(sha('lo'));
    expect(tracker.bytes).toBe(2);
  });
});
