import { createHash } from 'node:crypto';
import { decodeVector } from '@app/common';
import type { EmbedParams, EmbeddingVector } from '@app/common';

/**
 * The vectors of one embedding assignment, as its device sends them, checked before anything reaches
 * the client: one vector per input (an index of the task's inputs, never twice), whole float32s, all
 * finite, all of one length (the requested `dimensions` when the request gave one). They are held
 * here until the device says it is done, and written with the task's ending in one stream entry, so
 * that a batch whose device fails part way leaves nothing behind and can go to another device whole.
 * What it holds is bounded by the batch: its inputs × the longest vector a device may send.
 */
export class EmbedCollector {
  private readonly vectors: (EmbeddingVector | undefined)[];
  private received = 0;
  private dimensions: number | null;
  /** The float32 bytes of every vector received. */
  bytes = 0;

  constructor(private readonly params: EmbedParams) {
    this.vectors = new Array<EmbeddingVector | undefined>(params.input.length);
    this.dimensions = params.dimensions ?? null;
  }

  get inputs(): number {
    return this.vectors.length;
  }

  /** Takes a device's vectors; the reason they cannot be taken (nothing is taken then), or null. */
  add(data: EmbeddingVector[]): string | null {
    const fresh = new Set<number>();
    let dimensions = this.dimensions;
    for (const vector of data) {
      if (vector.index >= this.vectors.length) {
        return `vector for input ${vector.index}, of ${this.vectors.length}`;
      }
      if (this.vectors[vector.index] || fresh.has(vector.index)) {
        return `a second vector for input ${vector.index}`;
      }
      const values = decodeVector(vector.embedding);
      if (!values) {
        return `the vector for input ${vector.index} is not whole, finite float32 values`;
      }
      if (dimensions !== null && values.length !== dimensions) {
        return `the vector for input ${vector.index} has ${values.length} dimensions, not ${dimensions}`;
      }
      dimensions = values.length;
      fresh.add(vector.index);
    }
    this.dimensions = dimensions;
    for (const vector of data) {
      this.vectors[vector.index] = vector;
      this.bytes += (this.dimensions ?? 0) * 4;
    }
    this.received += data.length;
    return null;
  }

  /** Whether every input has its vector. */
  get complete(): boolean {
    return this.received === this.vectors.length;
  }

  /** The vectors in input order (once complete). */
  all(): EmbeddingVector[] {
    return this.vectors.filter((v): v is EmbeddingVector => v !== undefined);
  }

  /** SHA-256 of the vectors' float32 bytes in input order (the task record keeps it, never the vectors). */
  sha256(): string {
    const hash = createHash('sha256');
    for (const vector of this.all()) {
      hash.update(Buffer.from(vector.embedding, 'base64'));
    }
    return hash.digest('hex');
  }
}
