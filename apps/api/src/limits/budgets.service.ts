import { Injectable } from '@nestjs/common';
import { AppError, SpendCounter, budgetMonth, nextMonthStart } from '@app/common';
import type { MonthlyBudgets } from '@app/common';
import { MetricsService } from '../metrics/metrics.service';
import { BudgetReconciler } from './budget-reconciler.service';

/** Who pays for a request: its org and key, and their monthly token budgets (AuthContext has them). */
export interface Payer {
  orgId: string;
  apiKeyId: string;
  budgets: MonthlyBudgets;
}

/** Where a budget stands this month, as `GET /v1/usage` shows it. */
export interface BudgetStanding {
  monthly_token_budget: number;
  used: number;
  remaining: number;
}

/** The budgets of a caller this month; null where there is no budget. */
export interface BudgetReport {
  month: string;
  resets_at: string;
  org: BudgetStanding | null;
  key: BudgetStanding | null;
}

const tokens = (n: number) => n.toLocaleString('en-US');

/**
 * Monthly token budgets on the request path. A request of an org or key with a budget is refused with
 * 429 `insufficient_quota` once the month's tokens reach it; the spend is read from the counters in
 * Redis (SpendCounter), in the same round trip as the other limits, never from Postgres. Tokens count
 * when a task ends, so requests in flight when a budget runs out may take it past: the overshoot
 * bound is in docs/api.md, "Budgets".
 */
@Injectable()
export class BudgetsService {
  constructor(
    private readonly spend: SpendCounter,
    private readonly metrics: MetricsService,
    private readonly reconciler: BudgetReconciler,
  ) {}

  /** Throws 429 insufficient_quota when the org's or the key's budget is used up this month. */
  async check(payer: Payer): Promise<void> {
    const { org, key } = payer.budgets;
    if (org === null && key === null) {
      return;
    }
    this.reconciler.notice(payer.orgId);
    const now = Date.now();
    const used = await this.spend.used(payer.orgId, payer.apiKeyId, now);
    if (org !== null && used.org >= org) {
      throw this.exhausted('org_budget', 'Your organization’s', org, used.org, now);
    }
    if (key !== null && used.key >= key) {
      throw this.exhausted('key_budget', 'This API key’s', key, used.key, now);
    }
  }

  /** Where the caller's budgets stand this month. */
  async report(payer: Payer): Promise<BudgetReport> {
    const now = Date.now();
    const { org, key } = payer.budgets;
    if (org !== null || key !== null) {
      this.reconciler.notice(payer.orgId);
    }
    const used =
      org === null && key === null ? { org: 0, key: 0 } : await this.spend.used(payer.orgId, payer.apiKeyId, now);
    const standing = (budget: number | null, spent: number): BudgetStanding | null =>
      budget === null ? null : { monthly_token_budget: budget, used: spent, remaining: Math.max(0, budget - spent) };
    return {
      month: budgetMonth(now),
      resets_at: nextMonthStart(now).toISOString(),
      org: standing(org, used.org),
      key: standing(key, used.key),
    };
  }

  private exhausted(kind: string, whose: string, budget: number, used: number, now: number): AppError {
    this.metrics.rateLimitRejections.inc({ kind });
    return new AppError(
      'insufficient_quota',
      `${whose} monthly token budget of ${tokens(budget)} tokens is used up (${tokens(used)} tokens used in ` +
        `${budgetMonth(now)}). It resets at ${nextMonthStart(now).toISOString()}.`,
      null,
      // The openai SDKs retry a 429 unless told not to: this one will not clear before the month ends.
      { 'x-should-retry': 'false' },
    );
  }
}
