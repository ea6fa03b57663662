import { EventEmitter } from 'node:events';
import { ModulesContainer, Reflector } from '@nestjs/core';
import { Test } from '@nestjs/testing';
import type { FastifyReply } from 'fastify';
import { AppError, encodeVector } from '@app/common';
import type { AppConfig } from '@app/common';
import type { AuthContext } from '../auth/auth-context';
import type { EmbedRequest, EmbedResult } from '../embeddings/embed-request';
import { EmbeddingsHandler } from '../embeddings/embeddings.controller';
import type { EmbeddingsService } from '../embeddings/embeddings.service';
import { PresenceService } from '../intake/presence.service';
import { ModelsService } from '../models/models.service';
import { buildOpenApiDocument } from '../openapi/document';
import { documentedRoutes } from '../openapi/documented-routes';
import { OllamaChatHandler } from './ollama-chat.handler';
import { OllamaEmbedHandler } from './ollama-embed.handler';
import { OllamaController } from './ollama.controller';

const caller = { orgId: 'org-1' } as AuthContext;

const RESULT: EmbedResult = {
  model: 'nomic-embed-text:v1.5',
  mode: 'network',
  vectors: [encodeVector([0.5, 1])],
  promptTokens: 3,
  taskAddresses: ['network:8d0e1c1a-3a43-4d8e-9f4c-6f1d2b7a9c00'],
};

/** A reply as the handlers use it: headers, status, body, and the connection's close. */
function fakeReply() {
  const raw = Object.assign(new EventEmitter(), { destroyed: false, writableFinished: false });
  const sent: { status?: number; headers: Record<string, string>; body?: unknown } = { headers: {} };
  const reply = {
    raw,
    request: { id: 'req-1' },
    header: (name: string, value: string) => ((sent.headers[name] = value), reply),
    headers: (values: Record<string, string>) => (Object.assign(sent.headers, values), reply),
    type: (value: string) => ((sent.headers['content-type'] = value), reply),
    code: (status: number) => ((sent.status = status), reply),
    send: (body: unknown) => ((sent.body = body), reply),
  };
  const json = () => JSON.parse((sent.body as Buffer).toString('utf8'));
  return { reply: reply as unknown as FastifyReply, raw, sent, json };
}

/** The service as the handlers call it: what it was asked, and an answer to give. */
function fakeService(
  answer: (signal: AbortSignal) => Promise<{ result: EmbedResult; headers: Record<string, string> } | null>,
) {
  const calls: { request: EmbedRequest; signal: AbortSignal }[] = [];
  const service = {
    // As the real one: each batch's vectors go to onBatch before the answer (here, one batch).
    embed: async (
      _caller: AuthContext,
      request: EmbedRequest,
      signal: AbortSignal,
      onBatch?: (first: number, vectors: string[]) => void,
    ) => {
      calls.push({ request, signal });
      const answered = await answer(signal);
      if (answered) {
        onBatch?.(0, answered.result.vectors);
      }
      return answered;
    },
  };
  return { service: service as unknown as EmbeddingsService, calls };
}

const config = { DEFAULT_MODEL: 'default-embed' } as AppConfig;
const headers = { 'x-ratelimit-limit-requests': '60' };

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
