import { Body, Controller, Get, HttpCode, Param, Post } from '@nestjs/common';
import { ModulesContainer, Reflector } from '@nestjs/core';
import { Test } from '@nestjs/testing';
import { z } from 'zod';
import { AdminOnly, Public } from '../auth/access.decorator';
import { ApiRoute } from './api-route.decorator';
import { named } from './components';
import { buildOpenApiDocument } from './document';
import { documentedRoutes } from './documented-routes';

const thing = named('SpecThing', 'A thing of this spec.', z.strictObject({ id: z.string() }));
const thingBody = z.strictObject({ name: z.string() });

@Controller()
class ThingsController {
  @Get('v1/things/:id')
  @ApiRoute({ summary: 'One thing', tag: 'Models', params: { id: 'Its id' }, ok: { description: 'It', json: thing } })
  one(@Param('id') id: string) {
    return { id };
  }

  @Post('admin/things')
  @AdminOnly()
  @ApiRoute({
    summary: 'Make a thing',
    tag: 'Admin',
    body: { schema: thingBody, required: true },
    ok: { description: 'Made', json: thing },
    errors: [409],
  })
  make(@Body() body: unknown) {
    return body;
  }

  @Post('v1/things/ping')
  @Public()
  @HttpCode(204)
  @ApiRoute({ summary: 'Ping', tag: 'Operations', ok: { description: 'Pong' } })
  ping() {}
}

@Controller('v1/bare')
class BareController {
  @Get()
  bare() {
    return {};
  }
}

@Controller('v1/wrong')
class WrongParamsController {
  @Get(':id')
  @ApiRoute({ summary: 'Wrong', tag: 'Models', params: { name: 'Not the path’s' }, ok: { description: 'No' } })
  wrong() {
    return {};
  }
}

async function routesOf(...controllers: Array<new () => unknown>) {
  const moduleRef = await Test.createTestingModule({ controllers }).compile();
  return documentedRoutes(moduleRef.get(ModulesContainer), moduleRef.get(Reflector));
}

describe('the OpenAPI document, from the routes and their @ApiRoute', () => {
  it('takes method, path, access and success status from the route, the rest from its description', async () => {
    const doc = buildOpenApiDocument('1.2.3', await routesOf(ThingsController)) as any;
    const one = doc.paths['/v1/things/{id}'].get;
    expect(one.summary).toBe('One thing');
    expect(one.security).toEqual([{ apiKey: [] }, { apiKeyHeader: [] }]);
    expect(one.parameters).toEqual([
      { name: 'id', in: 'path', required: true, description: 'Its id', schema: { type: 'string' } },
    ]);
    expect(Object.keys(one.responses)).toEqual(['200', '401', '429', '500', '503']);
    expect(one.responses['200'].content['application/json'].schema).toEqual({
      $ref: '#/components/schemas/SpecThing',
    });
    const make = doc.paths['/admin/things'].post;
    expect(make.security).toEqual([{ adminToken: [] }]);
    expect(Object.keys(make.responses)).toEqual(['201', '401', '409', '500', '503']);
    expect(make.requestBody.content['application/json'].schema.required).toEqual(['name']);
    expect(Object.keys(doc.paths['/v1/things/ping'].post.responses)).toEqual(['204', '500']);
    expect(doc.tags).toEqual([{ name: 'Models' }, { name: 'Operations' }, { name: 'Admin' }]);
  });

  it('leaves the admin surface out of the public port’s document', async () => {
    const doc = buildOpenApiDocument('1.2.3', await routesOf(ThingsController), { admin: false }) as any;
    expect(Object.keys(doc.paths).sort()).toEqual(['/v1/things/ping', '/v1/things/{id}']);
    expect(doc.components.securitySchemes.adminToken).toBeUndefined();
    expect(doc.tags).toEqual([{ name: 'Models' }, { name: 'Operations' }]);
  });

  it('refuses a route without a description, or described with path parameters it does not have', async () => {
    await expect(routesOf(BareController)).rejects.toThrow('GET /v1/bare has no @ApiRoute description');
    await expect(routesOf(WrongParamsController)).rejects.toThrow(
      'GET /v1/wrong/:id is described with the path parameters [name]',
    );
  });
});
