import { InvalidArgumentError } from 'commander';
import { ModelKind, OrgCompat } from '@app/common/prisma/generated/enums';

/** Parses a whole number above 0 (commander's argParser: a bad value is a usage error). */
export function positiveInt(value: string): number {
  if (!/^[1-9][0-9]*$/.test(value)) {
    throw new InvalidArgumentError('must be a positive integer');
  }
  return Number(value);
}

/** A monthly token budget argument's `none`, as a number (commander keeps a parsed null as ''). */
export const NO_BUDGET = -1;

/** Parses a monthly token budget: a whole number of tokens (0 allowed), or `none` (NO_BUDGET). */
export function tokenBudget(value: string): number {
  if (value === 'none') {
    return NO_BUDGET;
  }
  if (!/^(0|[1-9][0-9]*)$/.test(value)) {
    throw new InvalidArgumentError('must be a number of tokens (0 or more) or none');
  }
  return Number(value);
}

/** Parses `on` or `off` into a boolean. */
export function onOff(value: string): boolean {
  if (value !== 'on' && value !== 'off') {
    throw new InvalidArgumentError('must be on or off');
  }
  return value === 'on';
}

/** Parses an organization's compat: `openai` or `nodea` (docs/api.md, "Compatibility"). */
export function orgCompat(value: string): OrgCompat {
  const values: string[] = Object.values(OrgCompat);
  if (!values.includes(value)) {
    throw new InvalidArgumentError(`must be ${values.join(' or ')}`);
  }
  return value as OrgCompat;
}

/** Parses a catalog model's kind: `chat` or `embedding`. */
export function modelKind(value: string): ModelKind {
  const values: string[] = Object.values(ModelKind);
  if (!values.includes(value)) {
    throw new InvalidArgumentError(`must be ${values.join(' or ')}`);
  }
  return value as ModelKind;
}

/** Parses a comma-separated list of model ids. */
export function modelList(value: string): string[] {
  // Model ids never contain a comma (MODEL_ID); empty items (a trailing comma) are dropped.
  return value
    .split(',')
    .map((m) => m.trim())
    .filter(Boolean);
}
