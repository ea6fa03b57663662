import { ANNOUNCE_LIMITS } from '@app/common';

/**
 * One device's allowance of announces (a token bucket holding ANNOUNCE_LIMITS.burst, refilled at
 * ANNOUNCE_LIMITS.perSecond; protocol/messages.ts says why). Per connection: a device that reconnects
 * to get a fresh one pays a handshake each time, and its announces over the rate are strikes that end
 * in a cooling-off.
 */
export class AnnounceRate {
  private tokens: number = ANNOUNCE_LIMITS.burst;
  private at: number;

  constructor(now = performance.now()) {
    this.at = now;
  }

  /** Takes one announce from the allowance; false when it is spent (the announce is refused). */
  take(now = performance.now()): boolean {
    this.tokens = Math.min(ANNOUNCE_LIMITS.burst, this.tokens + ((now - this.at) / 1000) * ANNOUNCE_LIMITS.perSecond);
    this.at = now;
    if (this.tokens < 1) {
      return false;
    }
    this.tokens -= 1;
    return true;
  }
}
