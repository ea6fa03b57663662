import { Controller, Get, Query } from '@nestjs/common';
import { AdminAuditService, PrismaService, parseAuditQuery, sqlOf } from '@app/common';
import { AdminOnly } from '../../auth/access.decorator';
import { parseInput } from '../../common/validation';
import { ApiRoute } from '../../openapi/api-route.decorator';
import { auditPage, auditQueryParams } from './audit.schemas';

/** The audit log of admin changes (docs/api.md, "Audit log"): read here, written by the admin services. */
@Controller('admin')
@AdminOnly()
export class AdminAuditController {
  private readonly audit: AdminAuditService;

  constructor(prisma: PrismaService) {
    this.audit = new AdminAuditService(sqlOf(prisma.pool));
  }

  /** Newest first, by pages: `since` and `kind` narrow it, `after` (a page's `last_id`) goes on. */
  @Get('audit')
  @ApiRoute({
    summary: 'The audit log of admin changes, newest first',
    tag: 'Admin',
    query: auditQueryParams,
    ok: { description: 'A page of entries', json: auditPage },
    errors: [400],
  })
  listAudit(@Query() params: unknown) {
    return this.audit.list(parseAuditQuery(parseInput(auditQueryParams, params ?? {})));
  }
}
