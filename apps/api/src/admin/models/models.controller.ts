import { Body, Controller, Delete, Get, HttpCode, Param, Patch, Post, Put } from '@nestjs/common';
import { AdminModelsService, PrismaService, sqlOf } from '@app/common';
import type { AuditActor } from '@app/common';
import { AdminOnly } from '../../auth/access.decorator';
import { AdminActor } from '../../auth/admin-actor';
import { parseInput } from '../../common/validation';
import { ApiRoute } from '../../openapi/api-route.decorator';
import { PARAM } from '../../openapi/components';
import { list } from '../list';
import { addModelBody, catalogModel, catalogModelList, enablement, updateModelBody } from './models.schemas';

/** The model catalog, and which organizations each model is enabled for. A model id's `/` is sent as %2F. */
@Controller('admin')
@AdminOnly()
export class AdminModelsController {
  private readonly models: AdminModelsService;

  constructor(prisma: PrismaService) {
    this.models = new AdminModelsService(sqlOf(prisma.pool));
  }

  @Get('models')
  @ApiRoute({
    summary: 'List the model catalog',
    tag: 'Admin',
    ok: { description: 'The catalog', json: catalogModelList },
  })
  async listModels() {
    return list(await this.models.list());
  }

  @Post('models')
  @ApiRoute({
    summary: 'Add a model to the catalog',
    tag: 'Admin',
    body: { schema: addModelBody, required: true },
    ok: { description: 'Added', json: catalogModel },
    errors: [400, 409],
  })
  addModel(@Body() body: unknown, @AdminActor() actor: AuditActor) {
    const input = parseInput(addModelBody, body ?? {});
    return this.models.as(actor).add({
      id: input.id,
      kind: input.kind,
      maxOutputTokens: input.max_output_tokens,
      ownedBy: input.owned_by,
      network: input.network,
    });
  }

  /** Changes a catalog model; fields left out keep their value. */
  @Patch('models/:model')
  @ApiRoute({
    summary:
      'Change a catalog model: its kind, max_tokens bound, owned_by, whether network devices serve it, the digests they may serve it with',
    tag: 'Admin',
    params: { model: PARAM.model },
    body: { schema: updateModelBody, required: true },
    ok: { description: 'The model', json: catalogModel },
    errors: [400, 404],
  })
  updateModel(@Param('model') model: string, @Body() body: unknown, @AdminActor() actor: AuditActor) {
    const input = parseInput(updateModelBody, body ?? {});
    return this.models.as(actor).update(model, {
      kind: input.kind,
      maxOutputTokens: input.max_output_tokens,
      ownedBy: input.owned_by,
      network: input.network,
      allowedDigests: input.allowed_digests,
    });
  }

  @Put('orgs/:org/models/:model')
  @HttpCode(200)
  @ApiRoute({
    summary: 'Enable a model for an organization',
    tag: 'Admin',
    params: { org: PARAM.org, model: PARAM.model },
    ok: { description: 'Enabled', json: enablement },
    errors: [400, 404],
  })
  enableModel(@Param('org') org: string, @Param('model') model: string, @AdminActor() actor: AuditActor) {
    return this.models.as(actor).enable(model, org);
  }

  @Delete('orgs/:org/models/:model')
  @ApiRoute({
    summary: 'Disable a model for an organization',
    tag: 'Admin',
    params: { org: PARAM.org, model: PARAM.model },
    ok: { description: 'Disabled', json: enablement },
    errors: [400, 404],
  })
  disableModel(@Param('org') org: string, @Param('model') model: string, @AdminActor() actor: AuditActor) {
    return this.models.as(actor).disable(model, org);
  }
}
