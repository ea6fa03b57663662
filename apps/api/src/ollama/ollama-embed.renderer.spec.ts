import { encodeVector } from '@app/common';
import type { EmbedResult } from '../embeddings/embed-request';
import { emptyOllamaEmbed, renderOllamaEmbed, renderOllamaEmbedding } from './ollama-embed.renderer';
import { ollamaEmbed, ollamaEmbeddings } from './ollama-embed.responses';

const result = (overrides: Partial<EmbedResult> = {}): EmbedResult => ({
  model: 'nomic-embed-text:v1.5',
  mode: 'direct',
  vectors: [encodeVector([0.5, -0.125]), encodeVector([0.1, 2])],
  promptTokens: 6,
  taskAddresses: ['direct:0b0c5d0e-58f7-4d43-8c53-1f8f7d3a8e10'],
  ...overrides,
});

const parse = (bytes: Buffer) => JSON.parse(bytes.toString('utf8'));

describe('Ollama embedding answers', () => {
  it('/api/embed: the vectors in input order, Ollama’s counts and durations (ns), mode and task addresses', async () => {
    const body = parse(await renderOllamaEmbed('embed', result(), 12.5));
    expect(body).toEqual({
      model: 'embed',
      embeddings: [
        [0.5, -0.125],
        [0.1, 2],
      ],
      total_duration: 12_500_000,
      load_duration: 0,
      prompt_eval_count: 6,
      mode: 'direct',
      task_addresses: ['direct:0b0c5d0e-58f7-4d43-8c53-1f8f7d3a8e10'],
    });
    expect(ollamaEmbed.safeParse(body).success).toBe(true);
  });

  it('/api/embed leaves prompt_eval_count out when a device gave no count', async () => {
    const body = parse(await renderOllamaEmbed('embed', result({ promptTokens: null }), 1));
    expect('prompt_eval_count' in body).toBe(false);
    expect(ollamaEmbed.safeParse(body).success).toBe(true);
  });

  it('/api/embed with nothing to embed: no vectors, no task', () => {
    const body = emptyOllamaEmbed('embed', 0.4);
    expect(body).toEqual({ model: 'embed', embeddings: [], total_duration: 400_000, load_duration: 0 });
    expect(ollamaEmbed.safeParse(body).success).toBe(true);
  });

  it('/api/embeddings: the one vector', async () => {
    const body = parse(await renderOllamaEmbedding(result({ vectors: [encodeVector([0.25, 1])] })));
    expect(body).toEqual({ embedding: [0.25, 1] });
    expect(ollamaEmbeddings.safeParse(body).success).toBe(true);
    expect(ollamaEmbeddings.safeParse({ embedding: [] }).success).toBe(true);
    await expect(renderOllamaEmbedding(result())).rejects.toThrow('one input embedded as 2 vectors');
  });
});
