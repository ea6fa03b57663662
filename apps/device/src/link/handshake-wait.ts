import { HANDSHAKE_ERRORS, handshakeWaitSchema } from '@app/common/protocol/device-protocol';

/**
 * The longest wait the agent accepts from a refusal. A dispatcher asks for at most 64 ×
 * DEVICE_COOLING_OFF_MS (about 11 minutes by default) or a minute (failed handshakes); this only
 * guards against a value that would keep the device away for good.
 */
export const MAX_WAIT_MS = 60 * 60_000;
/**
 * Devices refused together (a faulty agent release struck out, devices behind one address) come back
 * spread over a tenth of their wait, or at least a second: never before it, never all at once.
 */
const SPREAD_FRACTION = 0.1;
const MIN_SPREAD_MS = 1_000;

/**
 * How long to wait before the next handshake, for a refusal that asks the device to wait (`cooling_off`,
 * `too_many_failed_handshakes`), or null for any other error. The wait is the refusal's
 * `data.retry_after_ms` (else the number in its message), plus a spread.
 */
export function handshakeWait(error: Error & { data?: unknown }, random: () => number = Math.random): number | null {
  const message = error.message;
  if (!message.startsWith(HANDSHAKE_ERRORS.coolingOff) && !message.startsWith(HANDSHAKE_ERRORS.tooManyFailures)) {
    return null;
  }
  const data = handshakeWaitSchema.safeParse(error.data);
  const stated = data.success ? data.data.retry_after_ms : Number(/retry after (\d+) ms/.exec(message)?.[1] ?? NaN);
  // A refusal without a readable wait: the longest the dispatcher's limit of failures can ask.
  const wait = Math.min(MAX_WAIT_MS, Number.isFinite(stated) ? stated : 60_000);
  return Math.round(wait + random() * Math.max(MIN_SPREAD_MS, wait * SPREAD_FRACTION));
}
