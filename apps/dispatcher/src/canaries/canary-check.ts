import type { CanaryExpect } from '@app/common';

/**
 * Whether a device's answer to a canary is what its registration expects: `equals` the whole answer
 * (whitespace around it aside: runtimes differ in the newline they end with), `contains` anywhere in it.
 */
export function answersCanary(expect: CanaryExpect, answer: string): boolean {
  if ('equals' in expect) {
    return answer.trim() === expect.equals.trim();
  }
  return answer.includes(expect.contains);
}

/** ±25 %: devices connected together are not canaried together, and a device cannot learn the beat. */
const JITTER = 0.25;

/** The wait before a device's next canary: `interval` give or take a quarter, `random` in [0, 1). */
export function canaryDelay(interval: number, random: number = Math.random()): number {
  return Math.round(interval * (1 - JITTER + 2 * JITTER * random));
}
