import { setImmediate as nextTurn } from 'node:timers/promises';
import { decodeVector } from '@app/common';

/**
 * JSON of float32 vectors, written as bytes. An answer can hold 2,048 vectors of thousands of
 * values (millions of numbers): turning each into a JS string (Number#toString, JSON.stringify) costs
 * a string per number, and prints the float32 widened to a double with 17 digits (0.1 becomes
 * 0.10000000149011612), nearly twice the bytes. Here each value is written straight into a buffer as
 * the shortest decimal that reads back as the same float32, as Ollama (Go's float32 formatting) prints
 * them.
 */

/** Exact powers of ten (a double holds 10^k exactly up to k = 22). */
const EXACT_POW10 = Array.from({ length: 23 }, (_, k) => Number(`1e${k}`));
/** 10^e for every decimal exponent a finite float32 can have (from 1e-45 to 3.4e38), at [e + POW10_BIAS]. */
const POW10_BIAS = 46;
const POW10 = Array.from({ length: 86 }, (_, i) => Number(`1e${i - POW10_BIAS}`));
/** Nine significant digits always read back as the same float32. */
const MAX_DIGITS = 9;
/** Most float32 values need 8 or 9 digits: the search starts at 6 and goes up (or, when 6 are enough, tries fewer). */
const FIRST_TRY = 6;

/** Most bytes one value takes, with its comma: `-123456790000000000000,` (fixed notation below 1e21). */
export const MAX_FLOAT_BYTES = 24;

const ZERO = 0x30;
const MINUS = 0x2d;
const PLUS = 0x2b;
const DOT = 0x2e;
const COMMA = 0x2c;
const OPEN = 0x5b;
const CLOSE = 0x5d;
const E = 0x65;

/** The digits of the value being written, least significant first. */
const digits = new Uint8Array(MAX_DIGITS + 1);

/** The decimal tryDigits found last, as d / 10^k (module state: no object per value written). */
let foundD = 0;
let foundK = 0;
const NO_EXACT_SCALE = -1;
const MISS = 0;
const HIT = 1;

/**
 * Whether the nearest decimal of `p` significant digits to `a` (a positive float32 whose decimal
 * exponent is `e`) reads back as `a`; if so, it is left in foundD / foundK. NO_EXACT_SCALE where 10^k
 * is not exact (values below about 1e-14 or above about 1e27), which the caller formats the slow way.
 */
function tryDigits(a: number, e: number, p: number): number {
  const k = p - 1 - e;
  if (k > 22 || k < -22) {
    return NO_EXACT_SCALE;
  }
  const d = k >= 0 ? Math.round(a * EXACT_POW10[k]) : Math.round(a / EXACT_POW10[-k]);
  // The division (or product) of exact doubles is the correctly rounded double of the decimal: what a
  // client's JSON parser reads, and then narrows to float32.
  const back = k >= 0 ? d / EXACT_POW10[k] : d * EXACT_POW10[-k];
  if (Math.fround(back) !== a) {
    return MISS;
  }
  foundD = d;
  foundK = k;
  return HIT;
}

/** Finds the decimal of the fewest significant digits that reads back as `a` (into foundD / foundK); false: none with an exact scale. */
function shortestDecimal(a: number, e: number): boolean {
  const first = tryDigits(a, e, FIRST_TRY);
  if (first === NO_EXACT_SCALE) {
    return false;
  }
  if (first === HIT) {
    // A value short enough for six digits may be shorter still.
    for (let p = 1; p < FIRST_TRY; p++) {
      if (tryDigits(a, e, p) === HIT) {
        return true;
      }
    }
    // None was: a miss leaves the six-digit decimal in place.
    return true;
  }
  for (let p = FIRST_TRY + 1; p <= MAX_DIGITS; p++) {
    const result = tryDigits(a, e, p);
    if (result !== MISS) {
      return result === HIT;
    }
  }
  return false;
}

/** The same decimal found with toPrecision, for the values whose scale has no exact power of ten. */
function slowShortest(a: number): string {
  for (let p = 1; p < MAX_DIGITS; p++) {
    const text = a.toPrecision(p);
    if (Math.fround(Number(text)) === a) {
      return String(Number(text));
    }
  }
  return String(Number(a.toPrecision(MAX_DIGITS)));
}

/**
 * Writes a finite float32 value at `pos` as the shortest JSON number that reads back as it, in the
 * notation JavaScript uses (`0.000123`, `1.5e-7`, `12345.5`); returns the position after it.
 */
export function writeFloat32(out: Uint8Array, pos: number, value: number): number {
  if (value === 0) {
    out[pos] = ZERO;
    return pos + 1;
  }
  let a = value;
  if (a < 0) {
    out[pos++] = MINUS;
    a = -a;
  }
  // log10 may be off by one at the edges of a decade.
  let e = Math.floor(Math.log10(a));
  if (a >= POW10[e + 1 + POW10_BIAS]) {
    e++;
  } else if (a < POW10[e + POW10_BIAS]) {
    e--;
  }
  if (!shortestDecimal(a, e)) {
    const text = slowShortest(a);
    for (let i = 0; i < text.length; i++) {
      out[pos++] = text.charCodeAt(i);
    }
    return pos;
  }
  let d = foundD;
  let k = foundK;
  while (d % 10 === 0) {
    d /= 10;
    k--;
  }
  let n = 0;
  while (d > 0) {
    const q = Math.floor(d / 10);
    digits[n++] = d - q * 10;
    d = q;
  }
  // The decimal exponent of the first digit: the value is d.ddd × 10^exp.
  const exp = n - 1 - k;
  if (exp >= 0 && exp < 21) {
    for (let i = n - 1, at = 0; i >= 0 || at <= exp; at++, i--) {
      if (at === exp + 1) {
        out[pos++] = DOT;
      }
      out[pos++] = ZERO + (i >= 0 ? digits[i] : 0);
    }
  } else if (exp < 0 && exp >= -6) {
    out[pos++] = ZERO;
    out[pos++] = DOT;
    for (let z = -exp - 1; z > 0; z--) {
      out[pos++] = ZERO;
    }
    for (let i = n - 1; i >= 0; i--) {
      out[pos++] = ZERO + digits[i];
    }
  } else {
    out[pos++] = ZERO + digits[n - 1];
    if (n > 1) {
      out[pos++] = DOT;
      for (let i = n - 2; i >= 0; i--) {
        out[pos++] = ZERO + digits[i];
      }
    }
    out[pos++] = E;
    out[pos++] = exp > 0 ? PLUS : MINUS;
    let x = Math.abs(exp);
    if (x >= 10) {
      out[pos++] = ZERO + Math.floor(x / 10);
      x %= 10;
    }
    out[pos++] = ZERO + x;
  }
  return pos;
}

/** Buffers are filled a chunk at a time, and joined once at the end. */
const CHUNK_BYTES = 1024 * 1024;

/** A JSON document written as bytes, in chunks: text as it is given, vectors as arrays of numbers. */
export class JsonBytes {
  private readonly done: Buffer[] = [];
  private chunk = Buffer.allocUnsafe(CHUNK_BYTES);
  private pos = 0;

  private reserve(bytes: number): void {
    if (this.pos + bytes <= this.chunk.length) {
      return;
    }
    this.done.push(this.chunk.subarray(0, this.pos));
    this.chunk = Buffer.allocUnsafe(Math.max(CHUNK_BYTES, bytes));
    this.pos = 0;
  }

  /** JSON text, written as it is (UTF-8). */
  text(json: string): void {
    this.reserve(Buffer.byteLength(json));
    this.pos += this.chunk.write(json, this.pos);
  }

  /** `[v0,v1,…]`, each value as writeFloat32 writes it. */
  floats(values: Float32Array): void {
    this.reserve(values.length * MAX_FLOAT_BYTES + 2);
    const out = this.chunk;
    let pos = this.pos;
    out[pos++] = OPEN;
    for (let i = 0; i < values.length; i++) {
      if (i > 0) {
        out[pos++] = COMMA;
      }
      pos = writeFloat32(out, pos, values[i]);
    }
    out[pos++] = CLOSE;
    this.pos = pos;
  }

  /** The document. */
  bytes(): Buffer {
    return Buffer.concat([...this.done, this.chunk.subarray(0, this.pos)]);
  }
}

/**
 * Values written between two turns of the event loop: about 25 ms of work. The largest answer
 * (2,048 vectors of 1,536 values) takes most of a second to write, which would otherwise hold up
 * every other request of the instance, streams included.
 */
const VALUES_PER_TURN = 128 * 1024;

/**
 * Calls `write` with each vector's float32 values, in order, and lets the event loop run between
 * slices of work. Vectors come from the dispatcher, which has checked them (whole, finite float32
 * values): one that does not decode is a bug, not a client's or a device's fault.
 */
export async function eachVector(
  vectors: string[],
  write: (values: Float32Array, index: number) => void,
): Promise<void> {
  let sinceTurn = 0;
  for (let i = 0; i < vectors.length; i++) {
    const values = decodeVector(vectors[i]);
    if (!values) {
      throw new Error(`embedding ${i} is not whole, finite float32 values`);
    }
    write(values, i);
    sinceTurn += values.length;
    if (sinceTurn >= VALUES_PER_TURN && i < vectors.length - 1) {
      sinceTurn = 0;
      await nextTurn();
    }
  }
}
