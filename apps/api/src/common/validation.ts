import type { z } from 'zod';
import { AppError } from '@app/common';

/** The wire name of the field at fault: `messages[0].content`. */
export function paramPath(path: readonly PropertyKey[]): string | null {
  if (path.length === 0) {
    return null;
  }
  return path.map((p, i) => (typeof p === 'number' ? `[${p}]` : i === 0 ? String(p) : `.${String(p)}`)).join('');
}

/** Validates input against a schema; a failure becomes 400 invalid_request naming the param. */
export function parseInput<T>(schema: z.ZodType<T>, value: unknown): T {
  const parsed = schema.safeParse(value);
  if (parsed.success) {
    return parsed.data;
  }
  const issue = parsed.error.issues[0];
  // An unknown field is reported on its parent; name the field itself.
  const keys = issue.code === 'unrecognized_keys' ? issue.keys : [];
  const param = paramPath(keys.length > 0 ? [...issue.path, keys[0]] : issue.path);
  throw new AppError('invalid_request', param ? `Invalid '${param}': ${issue.message}` : issue.message, param);
}
