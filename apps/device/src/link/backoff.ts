// Reconnection: start fast (a dispatcher restart takes seconds), back off to 10 s so that a long outage
// costs little, and spread devices with ±50 % jitter so that they do not all return at the same instant.
const RECONNECT_DELAY_MS = 500;
const RECONNECT_DELAY_MAX_MS = 10_000;
const RANDOMIZATION_FACTOR = 0.5;
/** Moving to another dispatcher of the list: at once, spread over this much so that devices do not stampede. */
const FAILOVER_SPREAD_MS = 250;

/** Exponential backoff with jitter, the same curve as socket.io's own reconnection. */
export function backoffDelay(attempt: number, random: () => number = Math.random): number {
  const base = Math.min(RECONNECT_DELAY_MAX_MS, RECONNECT_DELAY_MS * 2 ** Math.min(attempt, 30));
  const jittered = base + base * RANDOMIZATION_FACTOR * (random() * 2 - 1);
  return Math.round(Math.min(RECONNECT_DELAY_MAX_MS, Math.max(0, jittered)));
}

/** The delay before trying another dispatcher after the current one failed: short, jittered. */
export function failoverDelay(random: () => number = Math.random): number {
  return Math.round(random() * FAILOVER_SPREAD_MS);
}
