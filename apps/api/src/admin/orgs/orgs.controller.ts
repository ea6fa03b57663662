import { Body, Controller, Get, Param, Patch, Post } from '@nestjs/common';
import { AdminOrgsService, PrismaService, sqlOf } from '@app/common';
import type { AuditActor } from '@app/common';
import { AdminOnly } from '../../auth/access.decorator';
import { AdminActor } from '../../auth/admin-actor';
import { parseInput } from '../../common/validation';
import { ApiRoute } from '../../openapi/api-route.decorator';
import { PARAM } from '../../openapi/components';
import { list } from '../list';
import { createOrgBody, limitsBody, newOrg, orgLimits, orgList } from './orgs.schemas';

/** Organizations (tenants), addressed by name: the admin CLI's `orgs` commands over HTTP. */
@Controller('admin')
@AdminOnly()
export class AdminOrgsController {
  private readonly orgs: AdminOrgsService;

  constructor(prisma: PrismaService) {
    this.orgs = new AdminOrgsService(sqlOf(prisma.pool));
  }

  @Get('orgs')
  @ApiRoute({ summary: 'List organizations', tag: 'Admin', ok: { description: 'The organizations', json: orgList } })
  async listOrgs() {
    return list(await this.orgs.list());
  }

  @Post('orgs')
  @ApiRoute({
    summary: 'Create an organization',
    tag: 'Admin',
    body: { schema: createOrgBody, required: true },
    ok: { description: 'Created', json: newOrg },
    errors: [400, 409],
  })
  createOrg(@Body() body: unknown, @AdminActor() actor: AuditActor) {
    return this.orgs.as(actor).create(parseInput(createOrgBody, body ?? {}).name);
  }

  /**
   * Sets limits (a number, or null to remove one), the network and resume switches, compat and the weight; fields
   * left out keep their value.
   */
  @Patch('orgs/:org')
  @ApiRoute({
    summary: 'Set an organization’s limits, network and resume switches, compat, weight and monthly token budget',
    tag: 'Admin',
    params: { org: PARAM.org },
    body: { schema: limitsBody, required: false },
    ok: { description: 'The limits', json: orgLimits },
    errors: [400, 404],
  })
  setLimits(@Param('org') org: string, @Body() body: unknown, @AdminActor() actor: AuditActor) {
    const input = parseInput(limitsBody, body ?? {});
    return this.orgs.as(actor).setLimits(org, {
      rpm: input.rpm,
      concurrency: input.concurrency,
      maxQueued: input.max_queued,
      network: input.network,
      resume: input.resume,
      compat: input.compat,
      weight: input.weight,
      monthlyTokenBudget: input.monthly_token_budget,
    });
  }
}
