import { CURRENT_DIALECT, PROTOCOL_VERSION } from './catalog';
import type { ProtocolDialect } from './catalog';
import { PROTOCOL_2_DIALECT } from './version-2';

/**
 * Which protocol versions a dispatcher serves: the current one and the one before, so that a fleet
 * upgrades without a lockstep (new dispatchers first, then the agents at their own pace). The agent
 * speaks only the current version. A session keeps its device's version and speaks it through that
 * version's dialect: what the device sends is read into the current shapes, what the dispatcher sends
 * is written in the device's. On the next bump, the version it replaces becomes a dialect of its own
 * (`version-3.ts` when 4 comes) in place of the oldest (`version-2.ts` goes).
 */
export const PREVIOUS_PROTOCOL_VERSION = PROTOCOL_2_DIALECT.version;

/** Newest first. */
export const SERVED_PROTOCOL_VERSIONS: readonly number[] = [PROTOCOL_VERSION, PREVIOUS_PROTOCOL_VERSION];

const DIALECTS: ReadonlyMap<number, ProtocolDialect> = new Map([
  [PROTOCOL_VERSION, CURRENT_DIALECT],
  [PREVIOUS_PROTOCOL_VERSION, PROTOCOL_2_DIALECT],
]);

/** How to speak with a device of this version; null for a version this dispatcher does not serve. */
export function dialectOf(version: number): ProtocolDialect | null {
  return DIALECTS.get(version) ?? null;
}
