import { Controller, Get, Query } from '@nestjs/common';
import {
  ADMIN_USAGE_GROUPS,
  AdminOrgsService,
  PrismaService,
  USAGE_GROUPS,
  UsageService,
  adminUsageQueryParams,
  parseUsageQuery,
  sqlOf,
  usageQueryParams,
} from '@app/common';
import { AdminOnly } from '../auth/access.decorator';
import { Caller } from '../auth/auth-context';
import type { AuthContext } from '../auth/auth-context';
import { parseInput } from '../common/validation';
import { ApiRoute } from '../openapi/api-route.decorator';
import { BudgetsService } from '../limits/budgets.service';
import { tenantUsageReport, usageReport } from './usage.schemas';

/** Usage reports: a tenant's own (`/v1/usage`, API key) and any organization's (`/admin/usage`, admin token). */
@Controller()
export class UsageController {
  private readonly usage: UsageService;
  private readonly orgs: AdminOrgsService;

  constructor(
    prisma: PrismaService,
    private readonly budgets: BudgetsService,
  ) {
    this.usage = new UsageService(prisma.pool);
    this.orgs = new AdminOrgsService(sqlOf(prisma.pool));
  }

  /** The caller's organization only: the org id comes from the key, never from the request. */
  @Get('v1/usage')
  @ApiRoute({
    summary: 'Usage of your organization',
    tag: 'Usage',
    query: usageQueryParams,
    ok: { description: 'The report, and your budgets', json: tenantUsageReport },
    errors: [400],
  })
  async tenant(@Caller() caller: AuthContext, @Query() params: unknown) {
    const query = parseUsageQuery(parseInput(usageQueryParams, params ?? {}), USAGE_GROUPS);
    const [report, budgets] = await Promise.all([this.usage.report(query, caller.orgId), this.budgets.report(caller)]);
    return { ...report, budgets };
  }

  @Get('admin/usage')
  @AdminOnly()
  @ApiRoute({
    summary: 'Usage of one organization or all',
    tag: 'Admin',
    query: adminUsageQueryParams,
    ok: { description: 'The report', json: usageReport },
    errors: [400, 404],
  })
  async admin(@Query() params: unknown) {
    const input = parseInput(adminUsageQueryParams, params ?? {});
    const query = parseUsageQuery(input, ADMIN_USAGE_GROUPS);
    const org = input.org === undefined ? null : await this.orgs.byName(input.org);
    return this.usage.report(query, org?.id ?? null);
  }
}
