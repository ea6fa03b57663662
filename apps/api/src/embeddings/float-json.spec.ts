import { encodeVector } from '@app/common';
import { JsonBytes, MAX_FLOAT_BYTES, eachVector, writeFloat32 } from './float-json';

/** The shortest decimal that reads back as the same float32, found the slow way. */
function reference(value: number): string {
  for (let p = 1; p <= 9; p++) {
    const text = Number(value.toPrecision(p));
    if (Math.fround(text) === value) {
      return String(text);
    }
  }
  throw new Error(`no decimal for ${value}`);
}

const written = (value: number) => {
  const out = Buffer.alloc(64);
  return out.toString('latin1', 0, writeFloat32(out, 0, value));
};

/** Deterministic float32 bit patterns (xorshift), every exponent and sign included. */
function* float32s(count: number): Generator<number> {
  const view = new DataView(new ArrayBuffer(4));
  let x = 0x9e3779b9;
  for (let i = 0; i < count; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    view.setUint32(0, x >>> 0);
    const v = view.getFloat32(0);
    if (Number.isFinite(v)) {
      yield v;
    }
  }
}

describe('writeFloat32', () => {
  it('writes the shortest decimal that reads back as the same float32, in JavaScript’s notation', () => {
    const cases: [number, string][] = [
      [0, '0'],
      [-0, '0'],
      [1, '1'],
      [-0.5, '-0.5'],
      [0.1, '0.1'],
      [100, '100'],
      [12345.5, '12345.5'],
      [123456789, '123456790'],
      [0.000001, '0.000001'],
      [1e-7, '1e-7'],
      [-0.0069292835, '-0.0069292835'],
      [1e20, '100000000000000000000'],
      [1e21, '1e+21'],
      [3.4028234663852886e38, '3.4028235e+38'],
      [1.401298464324817e-45, '1e-45'],
      [1.5e-40, '1.5e-40'],
    ];
    for (const [value, text] of cases) {
      expect([value, written(Math.fround(value))]).toEqual([value, text]);
    }
  });

  it('carries into a new digit where rounding reaches the next power of ten', () => {
    for (const value of [9.9999999, 0.099999999, 999999.99, 9.9999999e-10, 9.9999999e20]) {
      const v = Math.fround(value);
      expect([v, written(v)]).toEqual([v, reference(v)]);
    }
  });

  it('agrees with the slow way on the values embeddings hold (every float32 from 0.01 to 0.02, a stride apart)', () => {
    const wrong: string[] = [];
    const bits = new Uint32Array(1);
    const view = new Float32Array(bits.buffer);
    view[0] = 0.01;
    const from = bits[0];
    view[0] = 0.02;
    const to = bits[0];
    for (let b = from; b < to; b += 97) {
      bits[0] = b;
      const v = -view[0];
      if (written(v) !== reference(v)) {
        wrong.push(`${v}: ${written(v)}`);
      }
    }
    expect(wrong.slice(0, 5)).toEqual([]);
  });

  it('agrees with the slow way on 100,000 float32 values of every magnitude', () => {
    const wrong: string[] = [];
    for (const v of float32s(100_000)) {
      const text = written(v);
      if (text !== reference(v) || Math.fround(JSON.parse(text)) !== v || text.length + 1 > MAX_FLOAT_BYTES) {
        wrong.push(`${v}: ${text}`);
      }
    }
    expect(wrong.slice(0, 5)).toEqual([]);
  });
});

describe('JsonBytes', () => {
  it('joins text and vectors across chunks into one JSON document', () => {
    const out = new JsonBytes();
    const vector = Float32Array.from({ length: 50_000 }, (_, i) => Math.fround(Math.sin(i) / 7));
    out.text('{"name":"Zürich ✓","vectors":[');
    for (let i = 0; i < 4; i++) {
      if (i > 0) {
        out.text(',');
      }
      out.floats(vector);
    }
    out.text(']}');
    const bytes = out.bytes();
    // Larger than one chunk: the document was written in several.
    expect(bytes.length).toBeGreaterThan(1024 * 1024);
    const parsed = JSON.parse(bytes.toString('utf8'));
    expect(parsed.name).toBe('Zürich ✓');
    expect(parsed.vectors).toHaveLength(4);
    const back = Float32Array.from(parsed.vectors[3]);
    expect(back.every((v, i) => v === vector[i])).toBe(true);
  });

  it('writes an empty vector as []', () => {
    const out = new JsonBytes();
    out.floats(new Float32Array(0));
    expect(out.bytes().toString()).toBe('[]');
  });
});

describe('eachVector', () => {
  it('hands over every vector in order, letting the event loop run between slices', async () => {
    const vectors = Array.from({ length: 100 }, (_, i) => encodeVector(new Array(4096).fill(i)));
    const seen: number[] = [];
    let turns = 0;
    const ticker = setInterval(() => turns++, 0);
    await eachVector(vectors, (values, index) => {
      expect(values[0]).toBe(index);
      seen.push(index);
    });
    clearInterval(ticker);
    expect(seen).toEqual(Array.from({ length: 100 }, (_, i) => i));
    expect(turns).toBeGreaterThan(0);
  });

  it('refuses a vector that is not whole float32 values', async () => {
    await expect(eachVector(['AAAA'], () => undefined)).rejects.toThrow('embedding 0');
  });
});
