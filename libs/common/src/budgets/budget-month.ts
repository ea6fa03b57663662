/**
 * Budgets run by calendar month, in UTC: a month's spend starts at 0 at 00:00 UTC on its first day, as a
 * bill's does. Pure functions of a time, so that the boundaries are tested without waiting for them.
 */

/** The month of `at`, as `YYYY-MM` (UTC): the part of a spend counter's name that changes each month. */
export function budgetMonth(at: number): string {
  return new Date(at).toISOString().slice(0, 7);
}

/** The first instant of the month of `at` (UTC). */
export function monthStart(at: number): Date {
  const d = new Date(at);
  return new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1));
}

/** The first instant of the month after the month of `at` (UTC): when a budget resets. */
export function nextMonthStart(at: number): Date {
  const d = new Date(at);
  return new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1));
}

/**
 * When a month's spend counter may go: at the end of the month after it, so that a task that started in
 * one month and ended in the next, or a report of last month, still finds it.
 */
export function spendExpiry(at: number): Date {
  const d = new Date(at);
  return new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 2, 1));
}
