/**
 * Bounds the memory of holds: a key gets here only after it earned a refusal (an address after its
 * failed authentications or handshakes, a device after it was disconnected), so even a spread-out
 * attack fills it slowly; at about 100 bytes an entry, 100,000 of them are 10 MB. When full, the
 * oldest hold goes first.
 */
export const MAX_HOLDS = 100_000;

/**
 * Keys a process refuses until a time, kept in memory: once it learned (from Redis) that an address
 * or a device must wait, its next attempts are refused with no I/O at all, which is what makes a storm
 * of them cheap, and a valid request pays nothing for the check. Lapsed holds are dropped when read.
 */
export class Holds {
  private readonly until = new Map<string, number>();

  constructor(private readonly max = MAX_HOLDS) {}

  /** Refuses `key` for `ms` from `now`. */
  hold(key: string, ms: number, now = Date.now()): void {
    // Re-inserted, so that insertion order stays the order of the holds (the oldest is evicted first).
    this.until.delete(key);
    while (this.until.size >= this.max) {
      this.until.delete(this.until.keys().next().value!);
    }
    this.until.set(key, now + ms);
  }

  /** How long `key` stays held (ms), 0 when it is not. */
  remaining(key: string, now = Date.now()): number {
    const until = this.until.get(key);
    if (until === undefined) {
      return 0;
    }
    if (until <= now) {
      this.until.delete(key);
      return 0;
    }
    return until - now;
  }

  get size(): number {
    return this.until.size;
  }
}
