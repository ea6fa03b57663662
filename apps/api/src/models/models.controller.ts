import { Controller, Get, Param } from '@nestjs/common';
import { Caller } from '../auth/auth-context';
import type { AuthContext } from '../auth/auth-context';
import { ApiRoute } from '../openapi/api-route.decorator';
import { PARAM } from '../openapi/components';
import { ModelsService } from './models.service';
import { model, modelList } from './models.schemas';

@Controller(['v1/models', 'openai/v1/models'])
export class ModelsController {
  constructor(private readonly models: ModelsService) {}

  @Get()
  @ApiRoute({
    summary: 'List the models enabled for your organization',
    tag: 'Models',
    ok: { description: 'The models', json: modelList },
  })
  async list(@Caller() caller: AuthContext) {
    return { object: 'list', data: await this.models.list(caller.orgId) };
  }

  /** `/` inside a model id arrives URL-encoded as %2F and is decoded by the router. */
  @Get(':model')
  @ApiRoute({
    summary: 'Retrieve a model',
    tag: 'Models',
    params: { model: PARAM.model },
    ok: { description: 'The model', json: model },
    errors: [404],
  })
  retrieve(@Caller() caller: AuthContext, @Param('model') id: string) {
    return this.models.retrieve(caller.orgId, id);
  }
}
