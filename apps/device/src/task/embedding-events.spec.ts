import { EMBED_MAX_DIMENSIONS, decodeVector } from '@app/common/protocol/embeddings';
import { embeddingSchema } from '@app/common/protocol/messages';
import { EMBEDDING_EVENT_BYTES, embeddingEvents, embeddingUsage, vectorsProblem } from './embedding-events';

const ADDRESS = 'network:6f1c2a44-5b9e-4d3a-9a7e-1c2d3e4f5a6b';

/** A vector whose values say which input and which dimension they are, so that a mix-up shows. */
const vector = (index: number, dimensions: number) =>
  Float32Array.from({ length: dimensions }, (_, i) => Math.fround((index + 1) / (i + 3)));

/** The events as the agent sends them, numbered from 0. */
const events = (vectors: Float32Array[], budget?: number) =>
  [...embeddingEvents(ADDRESS, vectors, budget)].map((data, seq) => ({ task_address: ADDRESS, seq, data }));

void describe('embeddingEvents', () => {
  void it('keeps every event under the budget, and gives every input its vector once, in order', () => {
    // 3,072 dimensions: 16 KiB of base64 each, a dozen to an event.
    const vectors = Array.from({ length: 100 }, (_, i) => vector(i, 3072));
    const sent = events(vectors);
    expect(sent.length).toBeGreaterThan(1);
    for (const event of sent) {
      expect(Buffer.byteLength(JSON.stringify(event))).toBeLessThanOrEqual(EMBEDDING_EVENT_BYTES);
      expect(embeddingSchema.safeParse(event).success).toBe(true);
    }
    const data = sent.flatMap((e) => e.data);
    expect(data.map((d) => d.index)).toEqual(vectors.map((_, i) => i));
    data.forEach((d) => expect(decodeVector(d.embedding)).toEqual(vectors[d.index]));
    // Full events: each but the last would have gone over the budget with the next vector.
    const perEvent = sent[0].data.length;
    expect(sent.slice(0, -1).every((e) => e.data.length === perEvent)).toBe(true);
    const withOneMore = { ...sent[0], data: [...sent[0].data, sent[1].data[0]] };
    expect(Buffer.byteLength(JSON.stringify(withOneMore))).toBeGreaterThan(EMBEDDING_EVENT_BYTES);
  });

  void it('reckons an event with the largest seq, so that a late event fits too', () => {
    const vectors = Array.from({ length: 40 }, (_, i) => vector(i, 700));
    for (const [seq, event] of events(vectors, 20_000).entries()) {
      const late = { ...event, seq: 10_000_000 - seq };
      expect(Buffer.byteLength(JSON.stringify(late))).toBeLessThanOrEqual(20_000);
    }
  });

  void it('packs even the longest vectors the protocol carries into events under the budget', () => {
    const longest = [0, 1, 2].map((i) => vector(i, EMBED_MAX_DIMENSIONS));
    const sent = events(longest);
    expect(sent.map((e) => e.data.map((d) => d.index))).toEqual([[0, 1], [2]]);
    for (const event of sent) {
      expect(Buffer.byteLength(JSON.stringify(event))).toBeLessThanOrEqual(EMBEDDING_EVENT_BYTES);
    }
    expect(decodeVector(sent[1].data[0].embedding)).toEqual(longest[2]);
  });

  void it('sends one event for a small task', () => {
    const sent = events([vector(0, 768), vector(1, 768)]);
    expect(sent).toHaveLength(1);
    expect(sent[0].data.map((d) => d.index)).toEqual([0, 1]);
  });
});

void describe('vectorsProblem', () => {
  void it('takes one finite vector per input, all of one length within the protocol', () => {
    expect(vectorsProblem([vector(0, 4), vector(1, 4)], 2)).toBeNull();
    expect(vectorsProblem([vector(0, 4)], 2)).toMatch(/1 vectors for 2 inputs/);
    expect(vectorsProblem([vector(0, 4), vector(1, 5)], 2)).toMatch(/4 and 5 dimensions/);
    expect(vectorsProblem([new Float32Array(0)], 1)).toMatch(/0 dimensions/);
    expect(vectorsProblem([new Float32Array(EMBED_MAX_DIMENSIONS + 1)], 1)).toMatch(/16385 dimensions/);
    expect(vectorsProblem([Float32Array.of(1, Number.NaN)], 1)).toMatch(/not finite/);
    expect(vectorsProblem([Float32Array.of(1, Number.POSITIVE_INFINITY)], 1)).toMatch(/not finite/);
  });
});

void describe('embeddingUsage', () => {
  void it('counts the inputs as prompt and nothing as completion, or nothing at all', () => {
    expect(embeddingUsage(12)).toEqual({ prompt_tokens: 12, completion_tokens: 0, total_tokens: 12 });
    expect(embeddingUsage(0)).toEqual({ prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 });
    expect(embeddingUsage(null)).toBeNull();
  });
});
