import { Module } from '@nestjs/common';
import { BudgetReconciler } from './budget-reconciler.service';
import { BudgetsService } from './budgets.service';
import { LimitsService } from './limits.service';

@Module({
  providers: [LimitsService, BudgetsService, BudgetReconciler],
  exports: [LimitsService, BudgetsService, BudgetReconciler],
})
export class LimitsModule {}
