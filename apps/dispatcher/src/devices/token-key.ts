import { createHash } from 'node:crypto';

/**
 * A token's key: the first 16 hex digits (64 bits) of its SHA-256, what the dispatchers key a
 * device's cooling-off by (it is known at the handshake, before any lookup). Enough to tell devices
 * apart (with 100,000 devices two share a key about once in 10^9 registries).
 */
export const TOKEN_KEY_LENGTH = 16;

/** A token's SHA-256 (what the devices table stores) and its key, each a string of its own. */
export function tokenHashes(token: string): { hash: string; key: string } {
  const digest = createHash('sha256').update(token).digest();
  // Not a slice of `hash`: V8 would keep the whole hash alive behind a sliced string.
  return { hash: digest.toString('hex'), key: digest.toString('hex', 0, TOKEN_KEY_LENGTH / 2) };
}
