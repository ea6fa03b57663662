/**
 * An answer's vectors written as each batch arrives, while later batches still run on their devices,
 * and put together in input order once all are in: writing a thousand float vectors as JSON takes
 * longer than a batch's round trip, and would otherwise all come after the last batch. A part is the
 * JSON of one batch's vectors as items of the answer's array (with the comma before each, but for the
 * answer's very first).
 */
export class BatchParts {
  private readonly parts = new Map<number, Promise<Buffer>>();

  constructor(
    /** Writes the items of the vectors whose first has index `first` in the request. */
    private readonly write: (vectors: string[], first: number) => Promise<Buffer>,
  ) {}

  /** A batch's vectors, whose first is input `first` of the request. */
  add(first: number, vectors: string[]): void {
    const part = this.write(vectors, first);
    // A part not awaited yet (the request failed meanwhile) must not become an unhandled rejection.
    part.catch(() => undefined);
    this.parts.set(first, part);
  }

  /** Every part, in input order. */
  async all(): Promise<Buffer[]> {
    const ordered = [...this.parts.entries()].sort(([a], [b]) => a - b);
    return Promise.all(ordered.map(([, part]) => part));
  }
}
