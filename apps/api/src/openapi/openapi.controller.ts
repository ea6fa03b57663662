import { readFileSync } from 'node:fs';
import { Controller, Get, Inject, Req } from '@nestjs/common';
import type { FastifyRequest } from 'fastify';
import { APP_CONFIG, projectPath } from '@app/common';
import type { AppConfig } from '@app/common';
import { Public } from '../auth/access.decorator';
import { onAdminListener } from '../common/admin-listener';
import { buildOpenApiDocument } from './document';

/**
 * `GET /openapi.json`: the API described as OpenAPI 3.1, generated from the zod schemas (once). With
 * ADMIN_PORT set, the public port's document leaves the admin API and the dashboard out (they do not
 * exist there); the admin listener serves the whole document.
 */
@Controller()
@Public()
export class OpenApiController {
  private readonly documents = new Map<boolean, Record<string, unknown>>();

  constructor(@Inject(APP_CONFIG) private readonly config: AppConfig) {}

  @Get('openapi.json')
  get(@Req() request: FastifyRequest) {
    const admin = this.config.ADMIN_PORT === undefined || onAdminListener(request);
    let document = this.documents.get(admin);
    if (!document) {
      const { version } = JSON.parse(readFileSync(projectPath('package.json'), 'utf8')) as { version: string };
      document = buildOpenApiDocument(version, { admin });
      this.documents.set(admin, document);
    }
    return document;
  }
}
