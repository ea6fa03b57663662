import { OllamaRenderer } from './ollama.renderer';

describe('OllamaRenderer', () => {
  const renderer = () => {
    const startedAt = performance.now();
    return new OllamaRenderer('llama3.2:3b', 'network', 'network:t', startedAt, () => startedAt);
  };

  it('gives the device’s counts when it gave them', () => {
    const r = renderer();
    r.delta([{ index: 0, content: 'Hi' }]);
    expect(r.final('stop', { prompt_tokens: 9, completion_tokens: 6, total_tokens: 15 })).toMatchObject({
      done: true,
      prompt_eval_count: 9,
      eval_count: 6,
    });
  });

  it('leaves the counts out when the device gave none, as Ollama leaves out what it did not count', () => {
    const r = renderer();
    r.delta([{ index: 0, content: 'Hi' }]);
    const final = r.final('stop', null);
    expect(final).toMatchObject({ done: true, message: { content: 'Hi' }, eval_duration: expect.any(Number) });
    expect(final).not.toHaveProperty('eval_count');
    expect(final).not.toHaveProperty('prompt_eval_count');
    const line = JSON.parse(r.finalLine('stop', null));
    expect(line).not.toHaveProperty('eval_count');
    expect(line).not.toHaveProperty('prompt_eval_count');
  });

  it('times the evaluation from the first output as the flight dates it (held by the dispatcher), not from its arrival', () => {
    const start = performance.now();
    const r = new OllamaRenderer('llama3.2:3b', 'network', 'network:t', start - 1_000, () => start - 400);
    r.assigned();
    r.delta([{ index: 0, content: 'Hi' }]);
    const final = r.final('stop', null);
    expect(final.eval_duration).toBeGreaterThanOrEqual(400e6);
    expect(final.total_duration).toBeGreaterThanOrEqual(1_000e6);
    expect(final.prompt_eval_duration).toBe(0);
  });
});
