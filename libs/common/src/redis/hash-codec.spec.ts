import { HashCodec, hashField } from './hash-codec';

const codec = new HashCodec({
  name: hashField.text('n', 'a name'),
  note: hashField.optionalText('o', 'a note'),
  count: hashField.integer('c', 'a count'),
  size: hashField.optionalInteger('s', 'a size'),
  on: hashField.flag('f', 'a flag'),
  at: hashField.time('t', 'a time'),
  until: hashField.optionalTime('u', 'an end'),
  tags: hashField.list('l', 'a list'),
});

describe('HashCodec', () => {
  it('writes values as the hash holds them and reads them back', () => {
    const values = {
      name: 'x',
      note: 'y',
      count: 0,
      size: 12,
      on: true,
      at: new Date(1_000),
      until: new Date(2_000),
      tags: ['a', 'b'],
    };
    const hash = codec.encode(values);
    expect(hash).toEqual({ n: 'x', o: 'y', c: '0', s: '12', f: '1', t: '1000', u: '2000', l: '["a","b"]' });
    expect(codec.decode(hash)).toEqual(values);
  });

  it('writes an optional null as empty and reads empty or missing as null; leaves undefined out', () => {
    expect(codec.pairs({ note: null, size: null, until: null, on: false, count: undefined })).toEqual([
      'o',
      '',
      's',
      '',
      'u',
      '',
      'f',
      '0',
    ]);
    expect(codec.decode({ o: '', s: '' })).toMatchObject({ name: '', note: null, size: null, until: null, on: false });
    expect(codec.decode({ l: 'not json' }).tags).toEqual([]);
    expect(codec.decode({ l: '{"a":1}' }).tags).toEqual([]);
  });

  it('reads a text field with a fallback as the fallback when it is missing or empty', () => {
    const withFallback = new HashCodec({ kind: hashField.textOr<'a' | 'b'>('k', 'a kind', 'a') });
    expect(withFallback.encode({ kind: 'b' })).toEqual({ k: 'b' });
    expect(withFallback.decode({ k: 'b' }).kind).toBe('b');
    expect(withFallback.decode({}).kind).toBe('a');
    expect(withFallback.decode({ k: '' }).kind).toBe('a');
  });

  it('names its fields for scripts and describes them for the docs', () => {
    expect(codec.names).toMatchObject({ name: 'n', until: 'u', tags: 'l' });
    expect(codec.describe()[0]).toEqual({ field: 'n', kind: 'text', holds: 'a name' });
  });

  it('refuses a field name used twice', () => {
    expect(() => new HashCodec({ a: hashField.text('x', ''), b: hashField.flag('x', '') })).toThrow(/'x'/);
  });
});
