import { ANNOUNCE_LIMITS } from '@app/common/protocol/device-protocol';

/**
 * The agent's own allowance of announces per connection: half of what the dispatcher allows
 * (ANNOUNCE_LIMITS: 10 at once, 2 a second, beyond which each announce is refused and a strike), so
 * that it stays clear of it whatever its runtime does (a model list that changes at every probe, a
 * runtime that flaps), with room for network jitter. Its usual announces (connect, a change, the two
 * of a shutdown) go out at once; a runtime that keeps changing is announced once a second.
 */
export const AGENT_ANNOUNCE_BURST = ANNOUNCE_LIMITS.burst / 2;
export const AGENT_ANNOUNCES_PER_SECOND = ANNOUNCE_LIMITS.perSecond / 2;

type Settled<A> = (answer: A | null) => void;

/**
 * Holds one connection's announces to AGENT_ANNOUNCE_BURST at once and AGENT_ANNOUNCES_PER_SECOND
 * (a token bucket). An announce over that waits for its turn, and a newer state asked for meanwhile
 * replaces it (the dispatcher needs the latest state, not each step): every caller then hears the
 * answer to the one that went out.
 */
export class AnnouncePacer<P, A> {
  private tokens: number = AGENT_ANNOUNCE_BURST;
  private at = performance.now();
  private waiting: { payload: P; timeoutMs: number; settled: Settled<A>[]; timer: NodeJS.Timeout } | null = null;

  constructor(private readonly send: (payload: P, timeoutMs: number, settled: Settled<A>) => void) {}

  announce(payload: P, timeoutMs: number, settled: Settled<A>): void {
    if (this.waiting) {
      this.waiting.payload = payload;
      this.waiting.timeoutMs = timeoutMs;
      this.waiting.settled.push(settled);
      return;
    }
    this.refill();
    if (this.tokens >= 1) {
      this.go(payload, timeoutMs, [settled]);
      return;
    }
    const wait = Math.ceil(((1 - this.tokens) / AGENT_ANNOUNCES_PER_SECOND) * 1000);
    const timer = setTimeout(() => {
      const waiting = this.waiting!;
      this.waiting = null;
      this.refill();
      this.go(waiting.payload, waiting.timeoutMs, waiting.settled);
    }, wait);
    this.waiting = { payload, timeoutMs, settled: [settled], timer };
  }

  /** The connection is gone: an announce still waiting is dropped, its callers answered with null. */
  drop(): void {
    const waiting = this.waiting;
    this.waiting = null;
    if (waiting) {
      clearTimeout(waiting.timer);
      waiting.settled.forEach((settled) => settled(null));
    }
  }

  private refill(): void {
    const now = performance.now();
    this.tokens = Math.min(AGENT_ANNOUNCE_BURST, this.tokens + ((now - this.at) / 1000) * AGENT_ANNOUNCES_PER_SECOND);
    this.at = now;
  }

  private go(payload: P, timeoutMs: number, settled: Settled<A>[]): void {
    this.tokens -= 1;
    this.send(payload, timeoutMs, (answer) => settled.forEach((s) => s(answer)));
  }
}
