import { encodeVector } from '@app/common';
import { BatchParts } from './batch-parts';
import { embeddingItems, renderEmbeddings } from './embeddings.renderer';

describe('BatchParts', () => {
  it('puts batches together in input order, whatever order they came in, as if written at once', async () => {
    const vectors = [
      [1, 0],
      [0, 1],
      [0.5, 0.25],
      [-1, 2],
      [3, 4],
    ].map((v) => encodeVector(v));
    const result = {
      model: 'm',
      mode: 'network' as const,
      vectors,
      promptTokens: 5,
      taskAddresses: [],
    };
    for (const format of ['float', 'base64'] as const) {
      const parts = new BatchParts((batch, first) => embeddingItems(batch, first, format));
      parts.add(4, vectors.slice(4));
      parts.add(0, vectors.slice(0, 2));
      parts.add(2, vectors.slice(2, 4));
      const joined = await renderEmbeddings(result, 'm', format, await parts.all());
      expect(joined.toString()).toBe((await renderEmbeddings(result, 'm', format)).toString());
      expect(JSON.parse(joined.toString()).data.map((d: { index: number }) => d.index)).toEqual([0, 1, 2, 3, 4]);
    }
  });

  it('a part that failed while nobody waited for it is no unhandled rejection; all() reports it', async () => {
    const parts = new BatchParts(() => Promise.reject(new Error('bad vector')));
    parts.add(0, ['x']);
    await new Promise((resolve) => setImmediate(resolve));
    await expect(parts.all()).rejects.toThrow('bad vector');
  });
});
