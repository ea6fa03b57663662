import { completionId } from './chat-completion.renderer';

describe('completionId', () => {
  it('is chatcmpl- and 24 hex characters, and does not repeat', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 1_000; i++) {
      const id = completionId();
      expect(id).toMatch(/^chatcmpl-[0-9a-f]{24}$/);
      seen.add(id);
    }
    expect(seen.size).toBe(1_000);
  });
});
