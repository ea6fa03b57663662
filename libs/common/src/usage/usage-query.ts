import { z } from 'zod';
import { AppError } from '../errors/app-error';

/** What usage rows can be grouped by; `org` only on the admin route (a tenant sees one org). */
export const USAGE_GROUPS = ['model', 'key', 'day', 'hour', 'mode', 'kind', 'status'] as const;
export const ADMIN_USAGE_GROUPS = [...USAGE_GROUPS, 'org'] as const;
export type UsageGroup = (typeof ADMIN_USAGE_GROUPS)[number];

/** A year and a day: a leap year fits, a longer range is a mistake (and a slow query). */
const MAX_RANGE_MS = 366 * 86_400_000;
const DATE = /^\d{4}-\d{2}-\d{2}$/;

/** A validated usage request: [from, to) in UTC, the groups in the order asked. */
export interface UsageQuery {
  from: Date;
  to: Date;
  groupBy: UsageGroup[];
}

/** The query string of the usage routes, as the wire spells it (zod: the same schema feeds the OpenAPI document). */
export const usageQueryParams = z.strictObject({
  from: z
    .string()
    .optional()
    .describe('Start (inclusive): YYYY-MM-DD (UTC midnight) or an ISO 8601 date-time with Z or an offset'),
  to: z.string().optional().describe('End (exclusive), same formats; the range may span at most 366 days'),
  group_by: z
    .string()
    .optional()
    .describe(`Comma-separated: ${USAGE_GROUPS.join(', ')} (and org on /admin/usage)`),
});
export const adminUsageQueryParams = usageQueryParams.extend({
  org: z.string().optional().describe('Only this organization (by name)'),
});

const invalid = (param: string, message: string) => new AppError('invalid_request', message, param);

/** A `from`/`to` value: a calendar date (UTC midnight) or a date-time with its zone; null when malformed. */
function parseInstant(value: string): Date | null {
  if (DATE.test(value)) {
    const date = new Date(`${value}T00:00:00.000Z`);
    // 2026-02-30 parses (as March 2nd): only a date that round-trips is one.
    return !Number.isNaN(date.getTime()) && date.toISOString().startsWith(value) ? date : null;
  }
  if (!z.iso.datetime({ offset: true }).safeParse(value).success) {
    return null;
  }
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? null : date;
}

/** The current calendar month in UTC: [first day, first day of the next month). */
export function currentMonth(now: Date): { from: Date; to: Date } {
  return {
    from: new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1)),
    to: new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1)),
  };
}

/**
 * Checks the usage parameters (already known to be strings or absent) and fills in the defaults: a
 * bound left out is the current month's (in UTC). Bad values are 400 invalid_request naming the param.
 */
export function parseUsageQuery(
  params: { from?: string; to?: string; group_by?: string },
  allowed: readonly UsageGroup[],
  now = new Date(),
): UsageQuery {
  const month = currentMonth(now);
  const instant = (param: 'from' | 'to', value: string | undefined, fallback: Date) => {
    if (value === undefined) {
      return fallback;
    }
    const date = parseInstant(value);
    if (!date) {
      throw invalid(
        param,
        `Invalid '${param}': expected a date (2026-11-01) or a date-time with a zone (2026-11-01T00:00:00Z), got '${value}'`,
      );
    }
    return date;
  };
  const from = instant('from', params.from, month.from);
  const to = instant('to', params.to, month.to);
  if (from.getTime() > to.getTime()) {
    throw invalid('from', `Invalid 'from': ${from.toISOString()} is after 'to' (${to.toISOString()})`);
  }
  if (to.getTime() - from.getTime() > MAX_RANGE_MS) {
    throw invalid('to', "Invalid 'to': the range from 'from' to 'to' may span at most 366 days");
  }
  const groupBy: UsageGroup[] = [];
  for (const raw of params.group_by === undefined || params.group_by.trim() === '' ? [] : params.group_by.split(',')) {
    const name = raw.trim();
    if (!(allowed as readonly string[]).includes(name)) {
      throw invalid('group_by', `Invalid 'group_by': unknown group '${name}'; use any of ${allowed.join(', ')}`);
    }
    if (!groupBy.includes(name as UsageGroup)) {
      groupBy.push(name as UsageGroup);
    }
  }
  return { from, to, groupBy };
}
