import { ChunkRenderer, completionId } from './chat-completion.renderer';

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

describe('ChunkRenderer', () => {
  const meta = { id: 'chatcmpl-x', created: 1, model: 'm', mode: 'network', task_address: 'network:t' } as const;
  const lastChunk = (frames: string) =>
    frames
      .split('\n\n')
      .filter((f) => f.startsWith('data: {'))
      .map((f) => JSON.parse(f.slice('data: '.length)))
      .at(-1);

  it('ends with the usage chunk the device counted', () => {
    const usage = { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 };
    expect(lastChunk(new ChunkRenderer(meta, true).finish(['stop'], usage))).toMatchObject({ choices: [], usage });
  });

  it('says usage null, not zeros, when the device gave no counts', () => {
    expect(lastChunk(new ChunkRenderer(meta, true).finish(['stop'], null))).toMatchObject({ choices: [], usage: null });
  });
});
