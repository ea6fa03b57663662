import { Inject, Injectable } from '@nestjs/common';
import type { OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { LOGGER, PrismaService, SpendCounter, UsageService, monthStart } from '@app/common';
import type { Logger } from '@app/common';
import { PeriodicJob } from '../common/periodic-job';

/** How often every budget's counter is raised to what Postgres counted this month. */
const RECONCILE_INTERVAL_MS = 30_000;

/** The orgs that have a budget, or a key with one (all of them, or the one of $1), and those budgets. */
const budgeted = (oneOrg: boolean) => `
  SELECT o.id AS org_id, o.monthly_token_budget IS NOT NULL AS org_budget,
         coalesce(array_agg(k.id) FILTER (WHERE k.id IS NOT NULL), '{}') AS keys
  FROM organizations o
  LEFT JOIN api_keys k ON k.org_id = o.id AND k.monthly_token_budget IS NOT NULL AND k.revoked_at IS NULL
  WHERE (o.monthly_token_budget IS NOT NULL OR k.id IS NOT NULL)${oneOrg ? ' AND o.id = $1::uuid' : ''}
  GROUP BY o.id`;

interface BudgetedOrg {
  org_id: string;
  org_budget: boolean;
  keys: string[];
}

/**
 * Keeps the spend counters of budgets (SpendCounter) at least at what Postgres counted this month. The
 * counters are added to as tasks end, but only for orgs and keys that had a budget when the task was
 * queued, and an add can be lost (a dispatcher that dies between a task's ending and its count, a
 * Redis that restarts without its data): a budget set in the middle of a month would start from 0.
 * Every api instance raises every budget's counters to the month's usage (the usage rollups) every
 * RECONCILE_INTERVAL_MS, and an org's at once when this instance first sees its budget. Raising never
 * lowers a counter, so instances that run it together agree.
 */
@Injectable()
export class BudgetReconciler implements OnModuleInit, OnModuleDestroy {
  private readonly usage: UsageService;
  /** Orgs whose budgets this instance has reconciled since it started (or is reconciling). */
  private readonly seen = new Set<string>();
  /** Every budget's, periodically; an org's alone when it is first seen: one pass at a time either way. */
  private readonly passes = new PeriodicJob(() => this.reconcile(null), { everyMs: RECONCILE_INTERVAL_MS });

  constructor(
    private readonly prisma: PrismaService,
    private readonly spend: SpendCounter,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {
    this.usage = new UsageService(prisma.pool);
  }

  onModuleInit(): void {
    this.passes.start();
  }

  async onModuleDestroy(): Promise<void> {
    await this.passes.stop();
  }

  /** A request of an org with a budget: its counters are reconciled now if this instance has not yet. */
  notice(orgId: string): void {
    if (!this.seen.has(orgId)) {
      this.seen.add(orgId);
      void this.passes.run(() => this.reconcile(orgId));
    }
  }

  /** Every budget's counters, after the pass in progress. */
  reconcileAll(): Promise<void> {
    return this.passes.run();
  }

  /** The counters of one org's budgets (its own and its keys'), or of every org's (null). */
  private async reconcile(orgId: string | null): Promise<void> {
    try {
      const { rows } = await this.prisma.sql<BudgetedOrg>(budgeted(orgId !== null), orgId === null ? [] : [orgId]);
      for (const org of rows) {
        await this.raise(org);
      }
    } catch (error) {
      if (orgId !== null) {
        // Tried again at this org's next request.
        this.seen.delete(orgId);
      }
      this.logger.warn({ err: error, orgId }, 'could not reconcile the budgets’ spend counters; will retry');
    }
  }

  private async raise(org: BudgetedOrg): Promise<void> {
    const now = Date.now();
    const report = await this.usage.report({ from: monthStart(now), to: new Date(now), groupBy: ['key'] }, org.org_id);
    const byKey = new Map<unknown, number>();
    let total = 0;
    for (const row of report.data) {
      const used = Number(row.prompt_tokens) + Number(row.completion_tokens);
      byKey.set(row.key, used);
      total += used;
    }
    if (org.org_budget) {
      await this.spend.raiseOrg(org.org_id, now, total);
    }
    for (const key of org.keys) {
      await this.spend.raiseKey(org.org_id, key, now, byKey.get(key) ?? 0);
    }
  }
}
