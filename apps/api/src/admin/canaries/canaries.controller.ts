import { Body, Controller, Delete, Get, Param, Post } from '@nestjs/common';
import { AdminCanariesService, PrismaService, sqlOf } from '@app/common';
import type { AuditActor } from '@app/common';
import { AdminOnly } from '../../auth/access.decorator';
import { AdminActor } from '../../auth/admin-actor';
import { parseInput } from '../../common/validation';
import { ApiRoute } from '../../openapi/api-route.decorator';
import { PARAM } from '../../openapi/components';
import { list } from '../list';
import { addCanaryBody, canary, canaryList, canaryRemoved } from './canaries.schemas';

/**
 * Canary prompts per model (docs/operations.md, "Canaries"): the dispatchers send them to the network
 * devices that serve the model, and judge the devices by their answers.
 */
@Controller('admin')
@AdminOnly()
export class AdminCanariesController {
  private readonly canaries: AdminCanariesService;

  constructor(prisma: PrismaService) {
    this.canaries = new AdminCanariesService(sqlOf(prisma.pool));
  }

  @Post('models/:model/canaries')
  @ApiRoute({
    summary: 'Register a canary prompt for a model',
    tag: 'Admin',
    params: { model: PARAM.model },
    body: { schema: addCanaryBody, required: true },
    ok: { description: 'Registered', json: canary },
    errors: [400, 404],
  })
  addCanary(@Param('model') model: string, @Body() body: unknown, @AdminActor() actor: AuditActor) {
    return this.canaries.as(actor).add(model, parseInput(addCanaryBody, body ?? {}));
  }

  @Get('models/:model/canaries')
  @ApiRoute({
    summary: 'List a model’s canary prompts',
    tag: 'Admin',
    params: { model: PARAM.model },
    ok: { description: 'The canaries', json: canaryList },
    errors: [400, 404],
  })
  async listCanaries(@Param('model') model: string) {
    return list(await this.canaries.list(model));
  }

  @Delete('canaries/:id')
  @ApiRoute({
    summary: 'Remove a canary prompt',
    tag: 'Admin',
    params: { id: 'The canary’s id' },
    ok: { description: 'Removed', json: canaryRemoved },
    errors: [404],
  })
  removeCanary(@Param('id') id: string, @AdminActor() actor: AuditActor) {
    return this.canaries.as(actor).remove(id);
  }
}
