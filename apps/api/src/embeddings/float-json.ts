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
/** floor(log10(2^(x - 127))) for each float32 exponent field x: a value's decimal exponent, or one less. */
const DECADE_OF_EXP2 = Int8Array.from({ length: 256 }, (_, x) => Math.floor((x - 127) * Math.log10(2)));
/** A float32's bits, read through a view of one float (Math.log10 costs a third of a value's writing). */
const scratch = new Float32Array(1);
const scratchBits = new Uint32Array(scratch.buffer);
/** 10^i as integers, i = 0..9 (a decimal of nine digits fits an int32). */
const INT_POW10 = Int32Array.from({ length: 10 }, (_, i) => 10 ** i);

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

const MISS = -1;

/**
 * The integer d nearest to `a` × 10^k if d / 10^k reads back as `a` (a positive float32), else MISS.
 * For |k| ≤ 22, 10^k is an exact double, so the division (or product) is the correctly rounded double
 * of the decimal: what a client's JSON parser reads, and then narrows to float32.
 */
function tryScale(a: number, k: number): number {
  const d = k >= 0 ? Math.round(a * EXACT_POW10[k]) : Math.round(a / EXACT_POW10[-k]);
  const back = k >= 0 ? d / EXACT_POW10[k] : d * EXACT_POW10[-k];
  return Math.fround(back) === a ? d : MISS;
}

/** The shortest decimal found with toPrecision, for values whose scale has no exact power of ten. */
function slowShortest(a: number): string {
  for (let p = 1; p < MAX_DIGITS; p++) {
    const text = a.toPrecision(p);
    if (Math.fround(Number(text)) === a) {
      return String(Number(text));
    }
  }
  return String(Number(a.toPrecision(MAX_DIGITS)));
}

/** Writes the `n` decimal digits of `d` (an int32) at `pos`; returns the position after them. */
function writeDigits(out: Uint8Array, pos: number, d: number, n: number): number {
  for (let i = pos + n - 1; i >= pos; i--) {
    const q = (d / 10) | 0;
    out[i] = ZERO + d - q * 10;
    d = q;
  }
  return pos + n;
}

/** Writes `text` (ASCII) at `pos`; returns the position after it. */
function writeAscii(out: Uint8Array, pos: number, text: string): number {
  for (let i = 0; i < text.length; i++) {
    out[pos++] = text.charCodeAt(i);
  }
  return pos;
}

/**
 * Writes a finite float32 value at `pos` as the shortest JSON number that reads back as it, in the
 * notation JavaScript uses (`0.000123`, `1.5e-7`, `12345.5`); returns the position after it.
 * Integer arithmetic and no state outside the call: this runs for every value of an answer.
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
  // The decade of the float32's binary exponent is the decimal exponent, or one below it.
  scratch[0] = a;
  let e = DECADE_OF_EXP2[scratchBits[0] >>> 23];
  if (a >= POW10[e + 1 + POW10_BIAS]) {
    e++;
  }
  // Up to nine digits, k runs from -e to 8 - e: exact powers of ten for e from -14 to 22. Other
  // values (which embeddings hardly hold) are written the slow way.
  if (e < -14 || e > 22) {
    return writeAscii(out, pos, slowShortest(a));
  }
  // Most float32 values need eight or nine digits (nine always suffice): eight first, then fewer
  // while they still read back.
  let k = 7 - e;
  let d = tryScale(a, k);
  if (d === MISS) {
    k++;
    d = tryScale(a, k);
    if (d === MISS) {
      return writeAscii(out, pos, slowShortest(a));
    }
  } else {
    for (let fewer = k - 1; fewer >= -e; fewer--) {
      const shorter = tryScale(a, fewer);
      if (shorter === MISS) {
        break;
      }
      d = shorter;
      k = fewer;
    }
  }
  d |= 0;
  // d has as many digits as were asked for, or one more where rounding carried (9.9999999 to 10.000000).
  let n = k + e + 1;
  if (d >= INT_POW10[n]) {
    n++;
  }
  while (d % 10 === 0) {
    d = (d / 10) | 0;
    k--;
    n--;
  }
  // The decimal exponent of the first digit: the value is d.ddd × 10^exp.
  const exp = n - 1 - k;
  if (exp >= 0 && exp < 21) {
    if (n <= exp + 1) {
      pos = writeDigits(out, pos, d, n);
      for (let z = exp + 1 - n; z > 0; z--) {
        out[pos++] = ZERO;
      }
    } else {
      const fraction = n - exp - 1;
      const scale = INT_POW10[fraction];
      const whole = (d / scale) | 0;
      pos = writeDigits(out, pos, whole, exp + 1);
      out[pos++] = DOT;
      pos = writeDigits(out, pos, d - whole * scale, fraction);
    }
  } else if (exp < 0 && exp >= -6) {
    out[pos++] = ZERO;
    out[pos++] = DOT;
    for (let z = -exp - 1; z > 0; z--) {
      out[pos++] = ZERO;
    }
    pos = writeDigits(out, pos, d, n);
  } else {
    const scale = INT_POW10[n - 1];
    const first = (d / scale) | 0;
    out[pos++] = ZERO + first;
    if (n > 1) {
      out[pos++] = DOT;
      pos = writeDigits(out, pos, d - first * scale, n - 1);
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
