import { AppError } from '../errors/app-error';
import { ADMIN_USAGE_GROUPS, USAGE_GROUPS, currentMonth, parseUsageQuery } from './usage-query';

const NOW = new Date('2026-12-06T10:00:00Z');

/** The error a parse throws, for its code and param. */
function refusal(fn: () => unknown): AppError {
  try {
    fn();
  } catch (error) {
    return error as AppError;
  }
  throw new Error('expected a refusal');
}

describe('parseUsageQuery', () => {
  it('defaults to the current month in UTC, without groups', () => {
    expect(parseUsageQuery({}, USAGE_GROUPS, NOW)).toEqual({ ...currentMonth(NOW), groupBy: [] });
    expect(currentMonth(NOW)).toEqual({ from: new Date('2026-12-01T00:00:00Z'), to: new Date('2027-01-01T00:00:00Z') });
  });

  it('groups by kind on both routes, alone or with others, in the order asked', () => {
    expect(parseUsageQuery({ group_by: 'kind' }, USAGE_GROUPS, NOW).groupBy).toEqual(['kind']);
    expect(parseUsageQuery({ group_by: 'model, kind,day' }, USAGE_GROUPS, NOW).groupBy).toEqual([
      'model',
      'kind',
      'day',
    ]);
    expect(parseUsageQuery({ group_by: 'org,kind' }, ADMIN_USAGE_GROUPS, NOW).groupBy).toEqual(['org', 'kind']);
  });

  it('accepts every group it lists, and a group named twice once', () => {
    expect(parseUsageQuery({ group_by: USAGE_GROUPS.join(',') }, USAGE_GROUPS, NOW).groupBy).toEqual([...USAGE_GROUPS]);
    expect(parseUsageQuery({ group_by: 'kind,kind' }, USAGE_GROUPS, NOW).groupBy).toEqual(['kind']);
  });

  it('refuses a group it does not know (org outside the admin route), naming group_by and the groups', () => {
    for (const [groupBy, allowed] of [
      ['kinds', USAGE_GROUPS],
      ['org', USAGE_GROUPS],
    ] as const) {
      const error = refusal(() => parseUsageQuery({ group_by: groupBy }, allowed, NOW));
      expect(error).toBeInstanceOf(AppError);
      expect([error.code, error.param]).toEqual(['invalid_request', 'group_by']);
      expect(error.message).toContain(`unknown group '${groupBy}'`);
      expect(error.message).toContain('kind');
    }
  });

  it('takes dates and date-times with a zone; refuses anything else, and ranges past 366 days', () => {
    expect(parseUsageQuery({ from: '2026-11-01', to: '2026-11-02T06:00:00+02:00' }, USAGE_GROUPS, NOW)).toMatchObject({
      from: new Date('2026-11-01T00:00:00Z'),
      to: new Date('2026-11-02T04:00:00Z'),
    });
    expect(refusal(() => parseUsageQuery({ from: '2026-02-30' }, USAGE_GROUPS, NOW)).param).toBe('from');
    expect(refusal(() => parseUsageQuery({ to: '2026-11-02T06:00:00' }, USAGE_GROUPS, NOW)).param).toBe('to');
    expect(refusal(() => parseUsageQuery({ from: '2026-12-02', to: '2026-12-01' }, USAGE_GROUPS, NOW)).param).toBe(
      'from',
    );
    expect(refusal(() => parseUsageQuery({ from: '2025-01-01', to: '2026-01-03' }, USAGE_GROUPS, NOW)).param).toBe(
      'to',
    );
  });
});
