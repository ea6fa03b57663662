import { planUsage } from './usage-plan';
import type { UsagePlan } from './usage-plan';

const t = (iso: string) => new Date(iso);
const show = (plan: UsagePlan) => ({
  raw: plan.raw.map(([a, b]) => `${a.toISOString()} ${b.toISOString()}`),
  rolled: plan.rolled && `${plan.rolled[0].toISOString()} ${plan.rolled[1].toISOString()}`,
  rollup: plan.rollup.map(({ period, span: [a, b] }) => `${period} ${a.toISOString()} ${b.toISOString()}`),
});

describe('planUsage', () => {
  it('a whole month: one month row per group', () => {
    expect(show(planUsage(t('2026-11-01T00:00:00Z'), t('2026-12-01T00:00:00Z'), 'month'))).toEqual({
      raw: [],
      rolled: '2026-11-01T00:00:00.000Z 2026-12-01T00:00:00.000Z',
      rollup: ['month 2026-11-01T00:00:00.000Z 2026-12-01T00:00:00.000Z'],
    });
  });

  it('grouped by day: days; grouped by hour: hours', () => {
    expect(show(planUsage(t('2026-11-01T00:00:00Z'), t('2026-12-01T00:00:00Z'), 'day')).rollup).toEqual([
      'day 2026-11-01T00:00:00.000Z 2026-12-01T00:00:00.000Z',
    ]);
    expect(show(planUsage(t('2026-11-01T00:00:00Z'), t('2026-12-01T00:00:00Z'), 'hour')).rollup).toEqual([
      'hour 2026-11-01T00:00:00.000Z 2026-12-01T00:00:00.000Z',
    ]);
  });

  it('partial hours are raw, then hours, days and months as far as they reach', () => {
    expect(show(planUsage(t('2026-10-30T10:30:00Z'), t('2027-01-02T07:15:00Z'), 'month'))).toEqual({
      raw: ['2026-10-30T10:30:00.000Z 2026-10-30T11:00:00.000Z', '2027-01-02T07:00:00.000Z 2027-01-02T07:15:00.000Z'],
      rolled: '2026-10-30T11:00:00.000Z 2027-01-02T07:00:00.000Z',
      rollup: [
        'hour 2026-10-30T11:00:00.000Z 2026-10-31T00:00:00.000Z',
        'day 2026-10-31T00:00:00.000Z 2026-11-01T00:00:00.000Z',
        'month 2026-11-01T00:00:00.000Z 2027-01-01T00:00:00.000Z',
        'day 2027-01-01T00:00:00.000Z 2027-01-02T00:00:00.000Z',
        'hour 2027-01-02T00:00:00.000Z 2027-01-02T07:00:00.000Z',
      ],
    });
  });

  it('less than a month of days stays in days', () => {
    expect(show(planUsage(t('2026-11-02T10:30:00Z'), t('2026-11-05T07:15:00Z'), 'month')).rollup).toEqual([
      'hour 2026-11-02T11:00:00.000Z 2026-11-03T00:00:00.000Z',
      'day 2026-11-03T00:00:00.000Z 2026-11-05T00:00:00.000Z',
      'hour 2026-11-05T00:00:00.000Z 2026-11-05T07:00:00.000Z',
    ]);
  });

  it('within one hour, an empty range, or when asked: the tasks table only', () => {
    expect(show(planUsage(t('2026-11-02T10:10:00Z'), t('2026-11-02T10:50:00Z'), 'month'))).toEqual({
      raw: ['2026-11-02T10:10:00.000Z 2026-11-02T10:50:00.000Z'],
      rolled: null,
      rollup: [],
    });
    expect(show(planUsage(t('2026-11-01T00:00:00Z'), t('2026-11-01T00:00:00Z'), 'month')).raw).toEqual([]);
    expect(show(planUsage(t('2026-11-01T00:00:00Z'), t('2026-12-01T00:00:00Z'), 'month', true))).toEqual({
      raw: ['2026-11-01T00:00:00.000Z 2026-12-01T00:00:00.000Z'],
      rolled: null,
      rollup: [],
    });
  });
});
