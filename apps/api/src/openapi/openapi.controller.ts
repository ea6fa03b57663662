import { readFileSync } from 'node:fs';
import { Controller, Get } from '@nestjs/common';
import { projectPath } from '@app/common';
import { Public } from '../auth/access.decorator';
import { buildOpenApiDocument } from './document';

/** `GET /openapi.json`: the API described as OpenAPI 3.1, generated from the zod schemas (once). */
@Controller()
@Public()
export class OpenApiController {
  private document: Record<string, unknown> | undefined;

  @Get('openapi.json')
  get() {
    if (!this.document) {
      const { version } = JSON.parse(readFileSync(projectPath('package.json'), 'utf8')) as { version: string };
      this.document = buildOpenApiDocument(version);
    }
    return this.document;
  }
}
