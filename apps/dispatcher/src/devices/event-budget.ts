/**
 * A device's budget of events and bytes per second (token buckets holding one second's worth): a
 * device cannot make the dispatcher spend more on it than its share, whatever it sends.
 */
export class EventBudget {
  private events: number;
  private bytes: number;
  private at = performance.now();

  constructor(
    private readonly eventsPerSecond: number,
    private readonly bytesPerSecond: number,
  ) {
    this.events = eventsPerSecond;
    this.bytes = bytesPerSecond;
  }

  /** Takes one event of `size` bytes from the budget; false when it is spent. */
  take(size: number): boolean {
    const now = performance.now();
    const seconds = (now - this.at) / 1000;
    this.at = now;
    this.events = Math.min(this.eventsPerSecond, this.events + seconds * this.eventsPerSecond);
    this.bytes = Math.min(this.bytesPerSecond, this.bytes + seconds * this.bytesPerSecond);
    if (this.events < 1 || this.bytes < size) {
      return false;
    }
    this.events -= 1;
    this.bytes -= size;
    return true;
  }
}
