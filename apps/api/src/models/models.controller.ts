import { Controller, Get, Param } from '@nestjs/common';
import { Caller } from '../auth/auth-context';
import type { AuthContext } from '../auth/auth-context';
import { ModelsService } from './models.service';

@Controller('v1/models')
export class ModelsController {
  constructor(private readonly models: ModelsService) {}

  @Get()
  async list(@Caller() caller: AuthContext) {
    return { object: 'list', data: await this.models.list(caller.orgId) };
  }

  /** `/` inside a model id arrives URL-encoded as %2F and is decoded by the router. */
  @Get(':model')
  retrieve(@Caller() caller: AuthContext, @Param('model') model: string) {
    return this.models.retrieve(caller.orgId, model);
  }
}
