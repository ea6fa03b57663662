import { z } from 'zod';
import { AppError } from '../errors/app-error';
import { sqlState } from './sql';

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
/** Model ids as catalogs spell them: `llama3.2:3b`, `bartowski/Llama-3.2-3B-Instruct-GGUF:Q4_K_M`. */
export const MODEL_ID = /^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}$/;
export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const DURATION = /^([1-9][0-9]{0,5})(s|m|h|d)$/;
const UNIT_MS = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
/** Ten years: a longer expiry (or grace) is a mistake, not a policy. */
export const MAX_DURATION_MS = 3650 * UNIT_MS.d;

export const orgNameSchema = z
  .string()
  .regex(NAME, 'must be 1-64 characters: letters, digits, ".", "_" or "-", starting with a letter or digit');
export const modelIdSchema = z
  .string()
  .regex(MODEL_ID, 'must be 1-200 characters without spaces: letters, digits and . _ : / @ + -');

/** Parses `30d`, `12h`, `45m`, `90s` into milliseconds. */
export function parseDuration(value: string): number | null {
  const match = DURATION.exec(value);
  if (!match) {
    return null;
  }
  return Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS];
}

/** Validates one admin input; a failure is 400 invalid_request naming the param, before anything is written. */
export function check<T>(schema: z.ZodType<T>, value: unknown, param: string): T {
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    throw new AppError('invalid_request', `${param} ${parsed.error.issues[0]?.message ?? 'is invalid'}`, param);
  }
  return parsed.data;
}

export const iso = (d: Date | null): string | null => (d ? d.toISOString() : null);

/** A unique constraint refused the row (SQLSTATE 23505): it exists already. */
export function isUniqueViolation(error: unknown): boolean {
  return sqlState(error) === '23505';
}
