import { budgetMonth, monthStart, nextMonthStart, spendExpiry } from './budget-month';

describe('budget months (UTC)', () => {
  it('names the month of a time, and its boundaries', () => {
    const at = Date.parse('2026-12-31T23:59:59.999Z');
    expect(budgetMonth(at)).toBe('2026-12');
    expect(monthStart(at).toISOString()).toBe('2026-12-01T00:00:00.000Z');
    expect(nextMonthStart(at).toISOString()).toBe('2027-01-01T00:00:00.000Z');
    expect(spendExpiry(at).toISOString()).toBe('2027-02-01T00:00:00.000Z');
  });

  it('turns over at midnight UTC on the first, whatever the local time zone says', () => {
    const first = Date.parse('2027-01-01T00:00:00.000Z');
    expect(budgetMonth(first - 1)).toBe('2026-12');
    expect(budgetMonth(first)).toBe('2027-01');
    expect(nextMonthStart(first).toISOString()).toBe('2027-02-01T00:00:00.000Z');
  });

  it('handles February and leap years', () => {
    expect(nextMonthStart(Date.parse('2028-02-29T12:00:00Z')).toISOString()).toBe('2028-03-01T00:00:00.000Z');
    expect(monthStart(Date.parse('2027-02-28T12:00:00Z')).toISOString()).toBe('2027-02-01T00:00:00.000Z');
  });
});
