import { ModulesContainer, Reflector } from '@nestjs/core';
import { Test } from '@nestjs/testing';
import { AppError } from '@app/common';
import { EmbeddingsHandler } from '../embeddings/embeddings.controller';
import { RESULT, caller, config, fakeReply, fakeService, headers } from '../embeddings/embeddings-test-harness';
import { PresenceService } from '../intake/presence.service';
import { ModelsService } from '../models/models.service';
import { buildOpenApiDocument } from '../openapi/document';
import { documentedRoutes } from '../openapi/documented-routes';
import { OllamaChatHandler } from './ollama-chat.handler';
import { OllamaEmbedHandler } from './ollama-embed.handler';
import { OllamaController } from './ollama.controller';

describe('OllamaEmbedHandler (POST /api/embed, /api/embeddings)', () => {
  const models = (checked: string[]) =>
    ({
      forEmbedding: async (_org: string, model: string) => {
        checked.push(model);
        return {};
      },
    }) as unknown as ModelsService;

  it('/api/embed passes input, truncate and dimensions on, and answers Ollama’s shape', async () => {
    const { service, calls } = fakeService(async () => ({ result: RESULT, headers }));
    const { reply, sent, json } = fakeReply();
    const handler = new OllamaEmbedHandler(new EmbeddingsHandler(service, config), models([]));
    await handler.embed(caller, { model: 'e', input: 'hi', dimensions: 2, keep_alive: '5m' }, reply);
    expect(calls[0].request).toEqual({
      model: 'e',
      mode: 'auto',
      input: ['hi'],
      truncate: true,
      dimensions: 2,
      api: 'ollama',
      requestId: 'req-1',
    });
    expect(sent.headers['x-switchyard-ignored-params']).toBe('keep_alive');
    expect(json()).toMatchObject({ model: 'e', embeddings: [[0.5, 1]], prompt_eval_count: 3, load_duration: 0 });
  });

  it('/api/embed with no input checks the model and queues nothing, as Ollama answers a load', async () => {
    const checked: string[] = [];
    const { service, calls } = fakeService(async () => ({ result: RESULT, headers }));
    const { reply, sent } = fakeReply();
    await new OllamaEmbedHandler(new EmbeddingsHandler(service, config), models(checked)).embed(
      caller,
      { model: 'e', input: [] },
      reply,
    );
    expect(checked).toEqual(['e']);
    expect(calls).toEqual([]);
    expect(sent.body).toMatchObject({ model: 'e', embeddings: [], load_duration: 0 });
  });

  it('/api/embeddings embeds the prompt as one input; an empty prompt is {"embedding": []}', async () => {
    const checked: string[] = [];
    const { service, calls } = fakeService(async () => ({ result: RESULT, headers }));
    const handler = new OllamaEmbedHandler(new EmbeddingsHandler(service, config), models(checked));
    const first = fakeReply();
    await handler.embeddings(caller, { model: 'e', prompt: 'hi' }, first.reply);
    expect(calls[0].request).toEqual({ model: 'e', mode: 'auto', input: ['hi'], api: 'ollama', requestId: 'req-1' });
    expect(first.json()).toEqual({ embedding: [0.5, 1] });
    const empty = fakeReply();
    await handler.embeddings(caller, { model: 'e', prompt: '' }, empty.reply);
    expect(empty.sent.body).toEqual({ embedding: [] });
    expect(checked).toEqual(['e']);
    expect(calls).toHaveLength(1);
  });

  it('a model refused by the catalog is refused before anything, also with nothing to embed', async () => {
    const { service } = fakeService(async () => ({ result: RESULT, headers }));
    const refusing = {
      forEmbedding: async () => {
        throw new AppError('not_an_embedding_model', "'chat' is a chat model, not an embedding model.", 'model');
      },
    } as unknown as ModelsService;
    const { reply } = fakeReply();
    await expect(
      new OllamaEmbedHandler(new EmbeddingsHandler(service, config), refusing).embeddings(
        caller,
        { model: 'chat' },
        reply,
      ),
    ).rejects.toMatchObject({ code: 'not_an_embedding_model' });
  });
});

describe('Ollama’s embedding routes in the OpenAPI document', () => {
  it('documents /api/embed and /api/embeddings with their bodies, answers and Ollama’s error body', async () => {
    const moduleRef = await Test.createTestingModule({
      controllers: [OllamaController],
      providers: [OllamaChatHandler, OllamaEmbedHandler, ModelsService, PresenceService].map((provide) => ({
        provide,
        useValue: {},
      })),
    }).compile();
    const doc = buildOpenApiDocument(
      '1',
      documentedRoutes(moduleRef.get(ModulesContainer), moduleRef.get(Reflector)),
    ) as any;
    const embed = doc.paths['/api/embed'].post;
    expect(embed.responses['200'].content['application/json'].schema).toEqual({
      $ref: '#/components/schemas/OllamaEmbedResponse',
    });
    expect(embed.responses['400'].content['application/json'].schema).toEqual({
      $ref: '#/components/schemas/OllamaError',
    });
    expect(embed.requestBody.content['application/json'].schema.required).toEqual(['model']);
    const older = doc.paths['/api/embeddings'].post;
    expect(older.responses['200'].content['application/json'].schema).toEqual({
      $ref: '#/components/schemas/OllamaEmbeddingsResponse',
    });
    expect(Object.keys(older.requestBody.content['application/json'].schema.properties)).toEqual([
      'model',
      'prompt',
      'options',
      'keep_alive',
      'mode',
    ]);
  });
});
