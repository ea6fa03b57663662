import { createHash } from 'node:crypto';
import { vectorBytes } from '@app/common';
import type { EmbedParams, EmbeddingVector } from '@app/common';

/**
 * The vectors of one embedding assignment, as its device sends them, checked before anything reaches
 * the client: one vector per input (an index of the task's inputs, never twice), whole float32s, all
 * finite, all of one length (the requested `dimensions` when the request gave one). They are held
 * here, as bytes, until the device says it is done, and written with the task's ending in one stream
 * entry, in standard base64 written here (whatever characters the device used), so that a batch whose
 * device fails part way leaves nothing behind and can go to another device whole. What it holds is
 * bounded by the batch: its inputs × the longest vector the protocol carries.
 */
export class EmbedCollector {
  private readonly vectors: (Buffer | undefined)[];
  private received = 0;
  /** Bytes per vector (4 × dimensions), once known. */
  private width: number | null;
  /** The float32 bytes of every vector received. */
  bytes = 0;

  constructor(params: EmbedParams) {
    this.vectors = new Array<Buffer | undefined>(params.input.length);
    this.width = params.dimensions === undefined ? null : params.dimensions * 4;
  }

  get inputs(): number {
    return this.vectors.length;
  }

  /** How many inputs still have no vector. */
  get missing(): number {
    return this.vectors.length - this.received;
  }

  /** Takes a device's vectors; the reason they cannot be taken (nothing is taken then), or null. */
  add(data: EmbeddingVector[]): string | null {
    const fresh = new Map<number, Buffer>();
    let width = this.width;
    for (const vector of data) {
      if (vector.index >= this.vectors.length) {
        return `vector for input ${vector.index}, of ${this.vectors.length}`;
      }
      if (this.vectors[vector.index] || fresh.has(vector.index)) {
        return `a second vector for input ${vector.index}`;
      }
      const bytes = vectorBytes(vector.embedding);
      if (!bytes) {
        return `the vector for input ${vector.index} is not whole, finite float32 values`;
      }
      if (width !== null && bytes.byteLength !== width) {
        return `the vector for input ${vector.index} has ${bytes.byteLength / 4} dimensions, not ${width / 4}`;
      }
      width = bytes.byteLength;
      fresh.set(vector.index, bytes);
    }
    this.width = width;
    for (const [index, bytes] of fresh) {
      this.vectors[index] = bytes;
      this.bytes += bytes.byteLength;
    }
    this.received += fresh.size;
    return null;
  }

  /** Whether every input has its vector. */
  get complete(): boolean {
    return this.received === this.vectors.length;
  }

  /** The vectors in input order, in standard base64 (once complete). */
  all(): EmbeddingVector[] {
    const out: EmbeddingVector[] = [];
    this.vectors.forEach((bytes, index) => {
      if (bytes) {
        out.push({ index, embedding: bytes.toString('base64') });
      }
    });
    return out;
  }

  /** SHA-256 of the vectors' float32 bytes in input order (the task record keeps it, never the vectors). */
  sha256(): string {
    const hash = createHash('sha256');
    for (const bytes of this.vectors) {
      if (bytes) {
        hash.update(bytes);
      }
    }
    return hash.digest('hex');
  }
}
