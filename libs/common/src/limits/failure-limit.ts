import type { RedisClient } from '../redis/redis';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import { Holds } from './holds';

/** What a counted failure came to. */
export interface CountedFailure {
  /** How long the key is held from now (ms); 0 when it is not. */
  heldMs: number;
  /** The failure was past the limit (another instance, or a failure at the same time, reached it first). */
  over: boolean;
  /** This failure started the hold on this instance. */
  started: boolean;
}

const NOT_HELD: CountedFailure = { heldMs: 0, over: false, started: false };

/**
 * Failures per key (a client address) per window, counted across every instance in Redis with
 * rate-limiter-flexible. The failure that reaches `limit` holds the key until the window ends, and the
 * key is then refused before anything is looked at, its right credentials too, so that guessing stops
 * and costs nothing more. Each instance learns of a hold from the limiter's answer to a failure it
 * counts and keeps it in memory (Holds): a valid request never pays a Redis round trip for the check,
 * and another instance learns it at the key's first failure there. Fails open: with Redis unreachable,
 * nothing is counted or held.
 */
export class FailureLimit {
  private readonly limiter: RateLimiterRedis;
  private readonly holds = new Holds();

  constructor(
    redis: RedisClient,
    keyPrefix: string,
    private readonly limit: number,
    windowS: number,
  ) {
    this.limiter = new RateLimiterRedis({ storeClient: redis, keyPrefix, points: limit, duration: windowS });
  }

  /** How long the key must wait (ms; 0: it may try). In memory, no I/O. */
  wait(key: string): number {
    return this.holds.remaining(key);
  }

  /** Counts a failure of the key; when it reaches the limit, the key is held until the window ends. */
  async failed(key: string): Promise<CountedFailure> {
    const res = await this.limiter.penalty(key, 1).catch(() => null);
    if (!res || res.consumedPoints < this.limit) {
      return NOT_HELD;
    }
    const heldMs = Math.max(1, res.msBeforeNext);
    const started = this.holds.remaining(key) === 0;
    this.holds.hold(key, heldMs);
    return { heldMs, over: res.consumedPoints > this.limit, started };
  }
}
