import { encodeVector } from '@app/common';
import { EmbedCollector } from './embed-collector';

const vector = (index: number, values: number[]) => ({ index, embedding: encodeVector(values) });

describe('EmbedCollector', () => {
  it('takes one vector per input, in any order and over several events, and gives them back in input order', () => {
    const collector = new EmbedCollector({ input: ['a', 'b', 'c'] });
    expect(collector.add([vector(2, [0.5, 0.25])])).toBeNull();
    expect(collector.complete).toBe(false);
    expect(collector.add([vector(0, [1, 0]), vector(1, [0, 1])])).toBeNull();
    expect(collector.complete).toBe(true);
    expect(collector.all().map((v) => v.index)).toEqual([0, 1, 2]);
    expect(collector.bytes).toBe(3 * 2 * 4);
  });

  it('refuses an index the inputs do not have, or a second vector for one, and takes nothing of that event', () => {
    const collector = new EmbedCollector({ input: ['a', 'b'] });
    expect(collector.add([vector(0, [1]), vector(2, [1])])).toMatch(/input 2, of 2/);
    expect(collector.add([vector(0, [1]), vector(0, [1])])).toMatch(/second vector for input 0/);
    expect(collector.all()).toEqual([]);
    expect(collector.add([vector(1, [1])])).toBeNull();
    expect(collector.add([vector(1, [1])])).toMatch(/second vector for input 1/);
  });

  it('refuses vectors of different lengths, or of another length than the request asked for', () => {
    const mixed = new EmbedCollector({ input: ['a', 'b'] });
    expect(mixed.add([vector(0, [1, 0, 0])])).toBeNull();
    expect(mixed.add([vector(1, [1, 0])])).toMatch(/2 dimensions, not 3/);
    const shortened = new EmbedCollector({ input: ['a'], dimensions: 4 });
    expect(shortened.add([vector(0, [1, 0])])).toMatch(/2 dimensions, not 4/);
  });

  it('refuses bytes that are not whole float32 values, and values that are not finite', () => {
    const collector = new EmbedCollector({ input: ['a'] });
    expect(collector.add([{ index: 0, embedding: Buffer.from([1, 2, 3, 4, 5, 6]).toString('base64') }])).toMatch(
      /not whole, finite/,
    );
    expect(collector.add([vector(0, [1, Number.NaN])])).toMatch(/not whole, finite/);
    expect(collector.add([vector(0, [Number.POSITIVE_INFINITY])])).toMatch(/not whole, finite/);
  });

  it('writes the vectors in standard base64 itself, whatever characters the device used', () => {
    const collector = new EmbedCollector({ input: ['a'] });
    const standard = encodeVector([1, -2]);
    // Whitespace and URL-safe letters decode to the same bytes; the client gets the standard text.
    expect(collector.add([{ index: 0, embedding: ` ${standard.slice(0, 4)}\n${standard.slice(4)} ` }])).toBeNull();
    expect(collector.all()).toEqual([{ index: 0, embedding: standard }]);
  });

  it('hashes the vectors in input order, whatever order they came in', () => {
    const a = new EmbedCollector({ input: ['x', 'y'] });
    a.add([vector(0, [1, 2]), vector(1, [3, 4])]);
    const b = new EmbedCollector({ input: ['x', 'y'] });
    b.add([vector(1, [3, 4])]);
    b.add([vector(0, [1, 2])]);
    expect(b.sha256()).toBe(a.sha256());
    expect(a.sha256()).toMatch(/^[0-9a-f]{64}$/);
  });
});
