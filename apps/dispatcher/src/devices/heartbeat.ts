/**
 * socket.io's own heartbeat: the server pings every PING_SHARE of DEVICE_INACTIVITY_MS and drops a
 * device that has not answered within the rest of it (frozen, network gone): silence is noticed
 * within DEVICE_INACTIVITY_MS whatever the split. Pings are not free: each is a timer, a frame each
 * way and a wake-up of both processes, and at 10,000 devices pinging every 5 s (2,000 a second) cost
 * the dispatcher a fifth of a core when idle (bench); two thirds of the window (10 s of the default
 * 15 s) halves that, and still leaves the answer a third (5 s), hundreds of times what it needs.
 */
const PING_SHARE = 2 / 3;
const MIN_PING_MS = 1_000;

export function heartbeat(inactivityMs: number): { pingInterval: number; pingTimeout: number } {
  const pingInterval = Math.max(MIN_PING_MS, Math.round(inactivityMs * PING_SHARE));
  return { pingInterval, pingTimeout: Math.max(MIN_PING_MS, inactivityMs - pingInterval) };
}
