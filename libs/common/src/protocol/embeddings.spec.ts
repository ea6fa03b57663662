import { batchesOf, decodeVector, embedFeatures, encodeVector, vectorBytes } from './embeddings';
import { assignSchema, doneSchema, embeddingSchema } from './messages';

const address = 'network:0b6a8f8e-2f4e-4d51-9d8e-3c1f4f1f3a10';

describe('embeddings on the device protocol', () => {
  it('a vector survives base64 bit for bit, little-endian as OpenAI writes it', () => {
    const values = [0.1, -2.5, 1e-30, 3.4e38];
    const decoded = decodeVector(encodeVector(values));
    expect(decoded).toEqual(Float32Array.from(values));
    // 1.0f is 00 00 80 3f in little-endian.
    expect(Buffer.from(encodeVector([1]), 'base64')).toEqual(Buffer.from([0, 0, 0x80, 0x3f]));
  });

  it('refuses bytes that are not whole float32s, an empty vector, and values that are not finite (both NaNs, both infinities)', () => {
    expect(vectorBytes(encodeVector([-0, 1e-45, -3.4e38]))).not.toBeNull();
    for (const bad of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY]) {
      expect(vectorBytes(encodeVector([1, bad]))).toBeNull();
    }
    // A NaN with the sign bit set and another payload.
    expect(vectorBytes(Buffer.from([0, 0, 0x80, 0x3f, 1, 0, 0xc0, 0xff]).toString('base64'))).toBeNull();
    expect(decodeVector(Buffer.from([1, 2, 3]).toString('base64'))).toBeNull();
    expect(decodeVector('')).toBeNull();
    expect(decodeVector(encodeVector([Number.NaN]))).toBeNull();
    expect(decodeVector(encodeVector([Number.NEGATIVE_INFINITY]))).toBeNull();
  });

  it('a request needs embeddings, and embed_tokens for token ids, embed_dimensions for dimensions', () => {
    expect(embedFeatures({ input: ['a'] })).toEqual(['embeddings']);
    expect(embedFeatures({ input: [[1, 2]], dimensions: 8 })).toEqual([
      'embeddings',
      'embed_tokens',
      'embed_dimensions',
    ]);
  });

  it('an assignment is a chat task (with or without kind) or an embedding task, never a mix', () => {
    const base = { task_address: address, model: 'm', attempt: 1 };
    const params = { messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 };
    expect(assignSchema.safeParse({ ...base, params }).success).toBe(true);
    expect(assignSchema.safeParse({ ...base, kind: 'chat', params }).success).toBe(true);
    expect(assignSchema.safeParse({ ...base, kind: 'embed', embed: { input: ['a', 'b'] } }).success).toBe(true);
    expect(assignSchema.safeParse({ ...base, kind: 'embed', params }).success).toBe(false);
    expect(assignSchema.safeParse({ ...base, kind: 'embed', embed: { input: [] } }).success).toBe(false);
    expect(assignSchema.safeParse({ ...base, kind: 'embed', embed: { input: [''] } }).success).toBe(false);
    expect(assignSchema.safeParse({ ...base, kind: 'embed', embed: { input: ['a', [1]] } }).success).toBe(false);
  });

  it('vectors are base64 of at most 16,384 float32s, each for an index under 2,048; done may carry no finish reason', () => {
    const event = (embedding: string, index = 0) => ({ task_address: address, seq: 0, data: [{ index, embedding }] });
    expect(embeddingSchema.safeParse(event(encodeVector([1, 2]))).success).toBe(true);
    // Its characters are the dispatcher's to read (vectorBytes), not the schema's.
    expect(embeddingSchema.safeParse(event('')).success).toBe(false);
    expect(embeddingSchema.safeParse(event(encodeVector([1, 2]), 2048)).success).toBe(false);
    expect(embeddingSchema.safeParse(event(encodeVector(new Float32Array(16_384)))).success).toBe(true);
    expect(embeddingSchema.safeParse(event(encodeVector(new Float32Array(16_385)))).success).toBe(false);
    expect(doneSchema.safeParse({ task_address: address, seq: 1, finish_reasons: [], usage: null }).success).toBe(true);
  });
});

describe('batchesOf', () => {
  it('splits inputs into as few batches of at most the size as hold them, in order, of even sizes', () => {
    expect(batchesOf(['a', 'b', 'c', 'd', 'e'], 2)).toEqual([['a', 'b'], ['c', 'd'], ['e']]);
    expect(batchesOf([[1], [2]], 64)).toEqual([[[1], [2]]]);
    const inputs = Array.from({ length: 1000 }, (_, i) => `text ${i}`);
    const batches = batchesOf(inputs, 64);
    expect(batches.map((b) => b.length)).toEqual([...new Array(8).fill(63), ...new Array(8).fill(62)]);
    expect(batches.flat()).toEqual(inputs);
    expect(batchesOf(inputs.slice(0, 65), 64).map((b) => b.length)).toEqual([33, 32]);
    expect(batchesOf(inputs.slice(0, 128), 64).map((b) => b.length)).toEqual([64, 64]);
  });
});
