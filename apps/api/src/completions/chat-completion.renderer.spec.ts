import type { FinishReason } from '@app/common';
import { ChunkRenderer, OpenAIFormat, completionId } from './chat-completion.renderer';

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

describe('OpenAIFormat: compat', () => {
  const meta = { id: 'chatcmpl-x', created: 1, model: 'm', mode: 'network', task_address: 'network:t' } as const;
  const usage = { prompt_tokens: 9, completion_tokens: 24, total_tokens: 33 };
  const lastChunk = (frames: string) =>
    frames
      .split('\n\n')
      .filter((f) => f.startsWith('data: {'))
      .map((f) => JSON.parse(f.slice('data: '.length)))
      .at(-1);

  it("with n > 1, OpenAI's usage counts every choice; the Nodea specification's counts one (choice 0's, as relayed)", () => {
    const finishes: FinishReason[] = ['stop', 'stop', 'stop'];
    const openai = new OpenAIFormat(meta, true, false, 3, 'openai');
    expect(lastChunk(openai.finish(finishes, usage, [8, 7, 9])).usage).toEqual(usage);
    const nodea = new OpenAIFormat(meta, true, false, 3, 'nodea');
    const one = { prompt_tokens: 9, completion_tokens: 8, total_tokens: 17 };
    expect(lastChunk(nodea.finish(finishes, usage, [8, 7, 9])).usage).toEqual(one);
    expect(new OpenAIFormat(meta, true, false, 3, 'nodea').body(finishes, usage, [8, 7, 9])).toMatchObject({
      usage: one,
    });
    // No counts from the device: none shown, whatever the rules.
    expect(lastChunk(nodea.finish(finishes, null, [8, 7, 9])).usage).toBeNull();
  });

  it('with one choice, both rules agree', () => {
    const single = { prompt_tokens: 9, completion_tokens: 8, total_tokens: 17 };
    expect(new OpenAIFormat(meta, true, false, 1, 'nodea').body(['stop'], single)).toMatchObject({ usage: single });
  });
});
