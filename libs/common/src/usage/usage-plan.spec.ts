import { planUsage } from './usage-plan';

const t = (iso: string) => new Date(iso);
const iso = (spans: readonly (readonly [Date, Date])[]) => spans.map(([a, b]) => [a.toISOString(), b.toISOString()]);

describe('planUsage', () => {
  it('a whole month: rollups only, latency by day', () => {
    const plan = planUsage(t('2026-11-01T00:00:00Z'), t('2026-12-01T00:00:00Z'), false);
    expect(plan.raw).toEqual([]);
    expect(iso([plan.hours!])).toEqual([['2026-11-01T00:00:00.000Z', '2026-12-01T00:00:00.000Z']]);
    expect(plan.latencyHours).toEqual([]);
    expect(iso([plan.latencyDays!])).toEqual([['2026-11-01T00:00:00.000Z', '2026-12-01T00:00:00.000Z']]);
  });

  it('grouped by hour: latency from hours only', () => {
    const plan = planUsage(t('2026-11-01T00:00:00Z'), t('2026-12-01T00:00:00Z'), true);
    expect(plan.latencyDays).toBeNull();
    expect(iso(plan.latencyHours)).toEqual([['2026-11-01T00:00:00.000Z', '2026-12-01T00:00:00.000Z']]);
  });

  it('partial hours at the ends are raw, partial days are hours', () => {
    const plan = planUsage(t('2026-11-02T10:30:00Z'), t('2026-11-05T07:15:00Z'), false);
    expect(iso(plan.raw)).toEqual([
      ['2026-11-02T10:30:00.000Z', '2026-11-02T11:00:00.000Z'],
      ['2026-11-05T07:00:00.000Z', '2026-11-05T07:15:00.000Z'],
    ]);
    expect(iso([plan.hours!])).toEqual([['2026-11-02T11:00:00.000Z', '2026-11-05T07:00:00.000Z']]);
    expect(iso(plan.latencyHours)).toEqual([
      ['2026-11-02T11:00:00.000Z', '2026-11-03T00:00:00.000Z'],
      ['2026-11-05T00:00:00.000Z', '2026-11-05T07:00:00.000Z'],
    ]);
    expect(iso([plan.latencyDays!])).toEqual([['2026-11-03T00:00:00.000Z', '2026-11-05T00:00:00.000Z']]);
  });

  it('within one hour, or when asked: everything raw', () => {
    expect(iso(planUsage(t('2026-11-02T10:10:00Z'), t('2026-11-02T10:50:00Z'), false).raw)).toEqual([
      ['2026-11-02T10:10:00.000Z', '2026-11-02T10:50:00.000Z'],
    ]);
    const raw = planUsage(t('2026-11-01T00:00:00Z'), t('2026-12-01T00:00:00Z'), false, true);
    expect([raw.hours, raw.latencyDays, raw.latencyHours]).toEqual([null, null, []]);
    expect(planUsage(t('2026-11-01T00:00:00Z'), t('2026-11-01T00:00:00Z'), false).raw).toEqual([]);
  });
});
