import type { ModelIdentity } from '@app/common/protocol/messages';
import { IDENTITIES_BUDGET_BYTES, announcedFeatures, announcedIdentities } from './announced-identities';

const identity = (model: string, digest: string | null, root: string | null = null): ModelIdentity => ({
  model,
  digest,
  family: 'llama',
  parameter_size: '8B',
  quantization: 'Q4_K_M',
  root,
  context_length: 8192,
});

describe('announcedIdentities', () => {
  it('carries every identity that fits, as they are', () => {
    const all = [identity('a', `sha256:${'a'.repeat(64)}`), identity('b', null, '/models/b.gguf')];
    expect(announcedIdentities(all)).toEqual({ identities: all, dropped: 0 });
  });

  it('keeps a large list within the budget, those with a digest first', () => {
    const withRoots = Array.from({ length: 400 }, (_, i) =>
      identity(`m-${i}`, null, `/models/${'x'.repeat(400)}-${i}`),
    );
    const digested = Array.from({ length: 20 }, (_, i) => identity(`d-${i}`, `sha256:${String(i).padStart(64, '0')}`));
    const { identities, dropped } = announcedIdentities([...withRoots, ...digested]);
    expect(Buffer.byteLength(JSON.stringify(identities))).toBeLessThanOrEqual(IDENTITIES_BUDGET_BYTES);
    expect(identities.slice(0, 20)).toEqual(digested);
    expect(dropped).toBe(420 - identities.length);
    expect(dropped).toBeGreaterThan(0);
  });
});

describe('announcedFeatures', () => {
  it('adds embed_prefetch to a backend that embeds, once, and to no other', () => {
    expect(announcedFeatures(['tools', 'embeddings'])).toEqual(['tools', 'embeddings', 'embed_prefetch']);
    expect(announcedFeatures(['embeddings', 'embed_prefetch'])).toEqual(['embeddings', 'embed_prefetch']);
    expect(announcedFeatures(['tools', 'continue'])).toEqual(['tools', 'continue']);
    expect(announcedFeatures([])).toEqual([]);
  });
});
