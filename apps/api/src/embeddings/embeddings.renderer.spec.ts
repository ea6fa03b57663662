import { encodeVector } from '@app/common';
import type { EmbedResult } from './embed-request';
import { renderEmbeddings } from './embeddings.renderer';
import { embeddingList } from './embeddings.responses';

const result = (overrides: Partial<EmbedResult> = {}): EmbedResult => ({
  model: 'nomic-embed-text:v1.5',
  mode: 'network',
  vectors: [encodeVector([0.1, -0.25, 3]), encodeVector([1e-7, 0, -1])],
  promptTokens: 9,
  taskAddresses: ['network:6f1c0a57-7d3c-4f39-9a55-0a2f3f1f6c11'],
  ...overrides,
});

const parse = (bytes: Buffer) => JSON.parse(bytes.toString('utf8'));

describe('renderEmbeddings', () => {
  it('float: OpenAI’s list, each vector as its float32 values, the model as the client named it', async () => {
    const body = parse(await renderEmbeddings(result(), 'embed', 'float'));
    expect(body).toEqual({
      object: 'list',
      data: [
        { object: 'embedding', index: 0, embedding: [0.1, -0.25, 3] },
        { object: 'embedding', index: 1, embedding: [1e-7, 0, -1] },
      ],
      model: 'embed',
      usage: { prompt_tokens: 9, total_tokens: 9 },
      mode: 'network',
      task_addresses: ['network:6f1c0a57-7d3c-4f39-9a55-0a2f3f1f6c11'],
    });
    expect(embeddingList.safeParse(body).success).toBe(true);
  });

  it('float values are printed as short as float32 allows, not widened to 17 digits', async () => {
    const text = (await renderEmbeddings(result(), 'embed', 'float')).toString();
    expect(text).toContain('"embedding":[0.1,-0.25,3]');
    expect(text).not.toContain('0.10000000149011612');
  });

  it('base64: each vector’s bytes as the devices sent them', async () => {
    const r = result();
    const body = parse(await renderEmbeddings(r, 'embed', 'base64'));
    expect(body.data.map((d: { embedding: string }) => d.embedding)).toEqual(r.vectors);
    expect(embeddingList.safeParse(body).success).toBe(true);
  });

  it('leaves usage out when a device reported no prompt tokens, as the chat answer does', async () => {
    const body = parse(await renderEmbeddings(result({ promptTokens: null }), 'embed', 'float'));
    expect('usage' in body).toBe(false);
    expect(embeddingList.safeParse(body).success).toBe(true);
  });

  it('keeps input order over many vectors, and escapes the model name', async () => {
    const vectors = Array.from({ length: 300 }, (_, i) => encodeVector([i, -i]));
    const body = parse(await renderEmbeddings(result({ vectors }), 'a "quoted" model', 'float'));
    expect(body.model).toBe('a "quoted" model');
    expect(body.data.map((d: { index: number; embedding: number[] }) => [d.index, d.embedding[0]])).toEqual(
      vectors.map((_, i) => [i, i]),
    );
  });
});
