import { Module } from '@nestjs/common';
import { REDIS, SpendCounter } from '@app/common';
import type { RedisClient } from '@app/common';
import { BudgetReconciler } from './budget-reconciler.service';
import { BudgetsService } from './budgets.service';
import { LimitsService } from './limits.service';

@Module({
  providers: [
    LimitsService,
    BudgetsService,
    BudgetReconciler,
    // One for the budget checks and the reconciler (its scripts are defined once on the connection).
    { provide: SpendCounter, inject: [REDIS], useFactory: (redis: RedisClient) => new SpendCounter(redis) },
  ],
  exports: [LimitsService, BudgetsService, BudgetReconciler],
})
export class LimitsModule {}
