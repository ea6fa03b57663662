import { Injectable } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import type { AuthContext } from '../auth/auth-context';
import { setIgnoredParams } from '../common/ignored-params';
import { BatchParts } from '../embeddings/batch-parts';
import { EmbeddingsHandler } from '../embeddings/embeddings.controller';
import { ModelsService } from '../models/models.service';
import {
  embedIgnoredParams,
  embeddingsIgnoredParams,
  parseOllamaEmbed,
  parseOllamaEmbeddings,
} from './ollama-embed.dto';
import { emptyOllamaEmbed, ollamaVectors, renderOllamaEmbed, renderOllamaEmbedding } from './ollama-embed.renderer';

const JSON_TYPE = 'application/json; charset=utf-8';

/**
 * Serves Ollama's embedding routes, /api/embed and the older /api/embeddings (and their OpenGPU
 * aliases under /v2/ollama): Ollama's bodies in, the same EmbeddingsService as /v1/embeddings behind,
 * Ollama's answers out. Errors take Ollama's shape by route (AllExceptionsFilter).
 */
@Injectable()
export class OllamaEmbedHandler {
  constructor(
    private readonly handler: EmbeddingsHandler,
    private readonly models: ModelsService,
  ) {}

  async embed(caller: AuthContext, body: unknown, reply: FastifyReply): Promise<void> {
    const startedAt = performance.now();
    // Before validation, so that a 400 carries the header too.
    setIgnoredParams(reply, embedIgnoredParams(body));
    const request = parseOllamaEmbed(body);
    if (request.input.length === 0) {
      await this.nothingToEmbed(caller, request.model);
      await reply.code(200).send(emptyOllamaEmbed(request.model, performance.now() - startedAt));
      return;
    }
    const parts = new BatchParts(ollamaVectors);
    const result = await this.handler.run(
      caller,
      {
        model: request.model,
        mode: request.mode,
        input: request.input,
        truncate: request.truncate,
        ...(request.dimensions !== undefined ? { dimensions: request.dimensions } : {}),
        api: 'ollama',
        requestId: reply.request.id,
      },
      reply,
      parts,
    );
    if (!result) {
      return;
    }
    const json = await renderOllamaEmbed(request.model, result, performance.now() - startedAt, await parts.all());
    await reply.code(200).type(JSON_TYPE).send(json);
  }

  async embeddings(caller: AuthContext, body: unknown, reply: FastifyReply): Promise<void> {
    setIgnoredParams(reply, embeddingsIgnoredParams(body));
    const request = parseOllamaEmbeddings(body);
    if (request.prompt === '') {
      await this.nothingToEmbed(caller, request.model);
      await reply.code(200).send({ embedding: [] });
      return;
    }
    const result = await this.handler.run(
      caller,
      { model: request.model, mode: request.mode, input: [request.prompt], api: 'ollama', requestId: reply.request.id },
      reply,
    );
    if (!result) {
      return;
    }
    await reply
      .code(200)
      .type(JSON_TYPE)
      .send(await renderOllamaEmbedding(result));
  }

  /**
   * An empty input is Ollama's way to load a model without embedding anything; it answers no
   * vectors, after its usual checks of the model. Here too: the model must be an embedding model the
   * org may use (404, or 400 not_an_embedding_model), and no device is asked anything.
   */
  private async nothingToEmbed(caller: AuthContext, model: string): Promise<void> {
    await this.models.forEmbedding(caller.orgId, model);
  }
}
