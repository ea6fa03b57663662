import { MAX_TOKENS_COUNT } from '@app/common/protocol/chat';

/*
 * Reading the fields of a runtime's JSON answer: any may be missing, of another type or out of bounds,
 * and what the agent cannot read is null rather than an error (the runtime's word is passed on, or nothing).
 */

/** A string, or null when it is absent, empty, of another type or longer than `max`. */
export function text(value: unknown, max: number): string | null {
  return typeof value === 'string' && value.length > 0 && value.length <= max ? value : null;
}

/** A whole number from 1 to 100,000,000 (a context length), or null. */
export function count(value: unknown): number | null {
  return typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= 100_000_000 ? value : null;
}

/** A token count as the protocol carries it (a whole number from 0 to MAX_TOKENS_COUNT), or null. */
export function tokenCount(value: unknown): number | null {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 && value <= MAX_TOKENS_COUNT ? value : null;
}
