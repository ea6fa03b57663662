/**
 * Turns many small writes into few batches. The first item after a quiet spell goes out on the next
 * turn of the event loop (with whatever else that turn submitted); while a batch is in flight, or
 * within `windowMs` of the last one, items wait and go out together. One batch at a time.
 *
 * On the machines we run on, a write to a socket costs far more than the bytes in it (the peer is
 * woken up, the kernel switches), so under load this trades at most `windowMs` of latency for a
 * fraction of the writes; when idle it adds nothing.
 */
export class Coalescer<I, O> {
  private queue: { item: I; resolve: (value: O) => void; reject: (error: Error) => void }[] = [];
  private running = false;
  private scheduled = false;
  private lastRun = -Infinity;

  /**
   * @param run writes a batch; returns one result per item, in order (an Error rejects that item
   *   alone); a throw rejects the whole batch.
   */
  constructor(
    private readonly run: (items: I[]) => Promise<(O | Error)[]>,
    private readonly windowMs: number,
    private readonly maxBatch = 512,
  ) {}

  submit(item: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      this.schedule();
    });
  }

  /** Items waiting or in flight. */
  get pending(): number {
    return this.queue.length;
  }

  private schedule(): void {
    if (this.running || this.scheduled || this.queue.length === 0) {
      return;
    }
    this.scheduled = true;
    const wait = this.lastRun + this.windowMs - performance.now();
    if (wait > 0) {
      setTimeout(() => void this.flush(), wait);
    } else {
      setImmediate(() => void this.flush());
    }
  }

  private async flush(): Promise<void> {
    this.scheduled = false;
    this.running = true;
    this.lastRun = performance.now();
    const batch = this.queue.splice(0, this.maxBatch);
    try {
      const results = await this.run(batch.map((b) => b.item));
      batch.forEach((b, i) => {
        const result = results[i];
        if (result instanceof Error) {
          b.reject(result);
        } else {
          b.resolve(result);
        }
      });
    } catch (error) {
      for (const b of batch) {
        b.reject(error instanceof Error ? error : new Error(String(error)));
      }
    } finally {
      this.running = false;
      this.schedule();
    }
  }
}
