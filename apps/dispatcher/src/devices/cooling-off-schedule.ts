/**
 * Each repeat doubles the cooling-off, at most this many times: 64 × DEVICE_COOLING_OFF_MS (10 s by
 * default: 10, 20, 40 … 640 s, about 11 minutes). A token stuck in a loop of misdeeds then costs the
 * dispatchers one connection (and DEVICE_MAX_INVALID_EVENTS events) per 11 minutes, while an operator
 * who fixed the device or revoked it never waits longer than that for it to come back or be gone.
 */
export const MAX_DOUBLINGS = 6;

/**
 * A device that stayed out of trouble this long after its last cooling-off ended starts again from
 * the first one: a single incident (an agent bug one task triggered) is not held against it for days,
 * while a device that strikes out every few minutes keeps its long wait.
 */
export const FORGIVE_AFTER_MS = 60 * 60_000;

/**
 * The cooling-off of each repeat in order (the 1st disconnection, the 2nd …); the last one applies to
 * every later repeat. `firstMs` is DEVICE_COOLING_OFF_MS.
 */
export function coolingOffSchedule(firstMs: number): number[] {
  return Array.from({ length: MAX_DOUBLINGS + 1 }, (_, i) => firstMs * 2 ** i);
}

/** The cooling-off of the `repeat`-th disconnection (1 for the first) within the forgiveness period. */
export function coolingOffMs(repeat: number, firstMs: number): number {
  const schedule = coolingOffSchedule(firstMs);
  return schedule[Math.min(Math.max(repeat, 1), schedule.length) - 1];
}
