import { readFileSync } from 'node:fs';
import { Controller, Get, Inject, Req } from '@nestjs/common';
import type { OnApplicationBootstrap } from '@nestjs/common';
import { ModulesContainer, Reflector } from '@nestjs/core';
import type { FastifyRequest } from 'fastify';
import { APP_CONFIG, projectPath } from '@app/common';
import type { AppConfig } from '@app/common';
import { Public } from '../auth/access.decorator';
import { onAdminListener } from '../common/admin-listener';
import { ApiRoute } from './api-route.decorator';
import { buildOpenApiDocument } from './document';
import { documentedRoutes } from './documented-routes';

/**
 * `GET /openapi.json`: the API described as OpenAPI 3.1, built (once) from the application's routes
 * and their @ApiRoute descriptions. With ADMIN_PORT set, the public port's document leaves the admin
 * API and the dashboard out (they do not exist there); the admin listener serves the whole document.
 */
@Controller()
@Public()
export class OpenApiController implements OnApplicationBootstrap {
  private readonly documents = new Map<boolean, Record<string, unknown>>();

  constructor(
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    private readonly modules: ModulesContainer,
    private readonly reflector: Reflector,
  ) {}

  /** A route without a description stops the api at start, rather than its document when first asked. */
  onApplicationBootstrap(): void {
    documentedRoutes(this.modules, this.reflector);
  }

  @Get('openapi.json')
  @ApiRoute({
    summary: 'This document',
    tag: 'Operations',
    ok: { description: 'The OpenAPI 3.1 document', other: { 'application/json': 'OpenAPI 3.1' } },
  })
  get(@Req() request: FastifyRequest) {
    const admin = this.config.ADMIN_PORT === undefined || onAdminListener(request);
    let document = this.documents.get(admin);
    if (!document) {
      const { version } = JSON.parse(readFileSync(projectPath('package.json'), 'utf8')) as { version: string };
      document = buildOpenApiDocument(version, documentedRoutes(this.modules, this.reflector), { admin });
      this.documents.set(admin, document);
    }
    return document;
  }
}
