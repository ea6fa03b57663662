import { ModulesContainer, Reflector } from '@nestjs/core';
import { Test } from '@nestjs/testing';
import { AppError } from '@app/common';
import type { EmbedRequest } from './embed-request';
import { buildOpenApiDocument } from '../openapi/document';
import { documentedRoutes } from '../openapi/documented-routes';
import { EmbeddingsController, EmbeddingsHandler } from './embeddings.controller';
import { RESULT, caller, config, fakeReply, fakeService, headers } from './embeddings-test-harness';

describe('EmbeddingsHandler (POST /v1/embeddings)', () => {
  it('hands the validated request to the service and answers its vectors with the rate headers', async () => {
    const { service, calls } = fakeService(async () => ({ result: RESULT, headers }));
    const { reply, sent, json } = fakeReply();
    await new EmbeddingsHandler(service, config).handle(caller, { input: ['hi'], user: 'u1' }, reply);
    expect(calls.map((c) => c.request)).toEqual([
      { model: 'default-embed', mode: 'auto', input: ['hi'], api: 'openai', requestId: 'req-1' },
    ]);
    expect(sent.status).toBe(200);
    expect(sent.headers).toEqual({
      'x-switchyard-ignored-params': 'user',
      ...headers,
      'content-type': 'application/json; charset=utf-8',
    });
    expect(json()).toMatchObject({ model: 'default-embed', data: [{ index: 0, embedding: [0.5, 1] }] });
  });

  it('a refused body still carries the ignored fields, and reaches no service', async () => {
    const { service, calls } = fakeService(async () => ({ result: RESULT, headers }));
    const { reply, sent } = fakeReply();
    await expect(new EmbeddingsHandler(service, config).handle(caller, { input: '', foo: 1 }, reply)).rejects.toThrow(
      AppError,
    );
    expect(sent.headers['x-switchyard-ignored-params']).toBe('foo');
    expect(calls).toEqual([]);
  });

  it('a client that leaves aborts the service’s signal, and gets no answer', async () => {
    const { reply, raw, sent } = fakeReply();
    const { service, calls } = fakeService(
      (signal) => new Promise((resolve) => signal.addEventListener('abort', () => resolve(null))),
    );
    const handling = new EmbeddingsHandler(service, config).handle(caller, { model: 'e', input: 'x' }, reply);
    raw.emit('close');
    await handling;
    expect(calls[0].signal.aborted).toBe(true);
    expect(sent.body).toBeUndefined();
    expect(raw.listenerCount('close')).toBe(0);
  });

  it('a client gone before the request started is aborted at once', async () => {
    const { reply, raw } = fakeReply();
    raw.destroyed = true;
    const { service, calls } = fakeService(async () => null);
    await new EmbeddingsHandler(service, config).handle(caller, { model: 'e', input: 'x' }, reply);
    expect(calls[0].signal.aborted).toBe(true);
  });

  it('the connection closing after the answer aborts nothing', async () => {
    const { reply, raw } = fakeReply();
    const { service, calls } = fakeService(async () => ({ result: RESULT, headers }));
    const handler = new EmbeddingsHandler(service, config);
    const request: EmbedRequest = { model: 'e', mode: 'auto', input: ['x'], api: 'openai', requestId: 'r' };
    await handler.run(caller, request, reply);
    raw.writableFinished = true;
    raw.emit('close');
    expect(calls[0].signal.aborted).toBe(false);
  });
});

describe('EmbeddingsController in the OpenAPI document', () => {
  it('documents POST /v1/embeddings and its /openai/v1 alias: 200, the request schema, the answer, the errors', async () => {
    const moduleRef = await Test.createTestingModule({
      controllers: [EmbeddingsController],
      providers: [{ provide: EmbeddingsHandler, useValue: {} }],
    }).compile();
    const doc = buildOpenApiDocument(
      '1',
      documentedRoutes(moduleRef.get(ModulesContainer), moduleRef.get(Reflector)),
    ) as any;
    expect(Object.keys(doc.paths).sort()).toEqual(['/openai/v1/embeddings', '/v1/embeddings']);
    const create = doc.paths['/v1/embeddings'].post;
    expect(create.tags).toEqual(['Embeddings']);
    expect(Object.keys(create.responses)).toEqual([
      '200',
      '400',
      '401',
      '404',
      '413',
      '429',
      '500',
      '502',
      '503',
      '504',
    ]);
    expect(create.responses['200'].content['application/json'].schema).toEqual({
      $ref: '#/components/schemas/CreateEmbeddingResponse',
    });
    const body = create.requestBody.content['application/json'].schema;
    expect(body.required).toEqual(['input']);
    expect(Object.keys(body.properties)).toEqual(['model', 'input', 'encoding_format', 'dimensions', 'mode']);
    expect(body.properties.input.anyOf).toHaveLength(4);
    expect(doc.components.schemas.CreateEmbeddingResponse.required).toEqual([
      'object',
      'data',
      'model',
      'mode',
      'task_addresses',
    ]);
  });
});
