import { Body, Controller, HttpCode, Inject, Injectable, Post, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import { APP_CONFIG } from '@app/common';
import type { AppConfig } from '@app/common';
import { Caller } from '../auth/auth-context';
import type { AuthContext } from '../auth/auth-context';
import { setIgnoredParams } from '../common/ignored-params';
import { ApiRoute } from '../openapi/api-route.decorator';
import { embeddingIgnoredParams, parseCreateEmbedding } from './create-embedding.dto';
import type { EmbedRequest, EmbedResult } from './embed-request';
import { createEmbeddingSchema } from './embedding.schema';
import { BatchParts } from './batch-parts';
import { embeddingItems, renderEmbeddings } from './embeddings.renderer';
import { embeddingList } from './embeddings.responses';
import { EmbeddingsService } from './embeddings.service';

/**
 * Serves embeddings requests over HTTP: OpenAI's POST /v1/embeddings here, and for Ollama's routes
 * (ollama/ollama-embed.handler.ts) the part both wire formats share, `run`.
 */
@Injectable()
export class EmbeddingsHandler {
  constructor(
    private readonly embeddings: EmbeddingsService,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
  ) {}

  /**
   * Embeds a validated request for the client of `reply`: its rate-limit headers go on the reply. A
   * client that leaves has its batches withdrawn (the service's signal), and gets null: there is no
   * one to answer. `parts`, when given, writes each batch's vectors as the batch comes in.
   */
  async run(
    caller: AuthContext,
    request: EmbedRequest,
    reply: FastifyReply,
    parts?: BatchParts,
  ): Promise<EmbedResult | null> {
    const raw = reply.raw;
    const left = new AbortController();
    const onClose = () => {
      if (!raw.writableFinished) {
        left.abort();
      }
    };
    if (raw.destroyed) {
      left.abort();
    } else {
      raw.on('close', onClose);
    }
    try {
      const answer = await this.embeddings.embed(
        caller,
        request,
        left.signal,
        parts ? (first, vectors) => parts.add(first, vectors) : undefined,
      );
      if (!answer) {
        return null;
      }
      void reply.headers(answer.headers);
      return answer.result;
    } finally {
      raw.off('close', onClose);
    }
  }

  async handle(caller: AuthContext, body: unknown, reply: FastifyReply): Promise<void> {
    // Before validation, so that a 400 carries the header too.
    setIgnoredParams(reply, embeddingIgnoredParams(body));
    const { encodingFormat, ...request } = parseCreateEmbedding(body, this.config.DEFAULT_MODEL);
    const parts = new BatchParts((vectors, first) => embeddingItems(vectors, first, encodingFormat));
    const result = await this.run(caller, { ...request, api: 'openai', requestId: reply.request.id }, reply, parts);
    if (!result) {
      return;
    }
    const json = await renderEmbeddings(result, request.model, encodingFormat, await parts.all());
    await reply.code(200).type('application/json; charset=utf-8').send(json);
  }
}

/** OpenAI's embeddings route, and its alias under Nodea's base path (/openai/v1), as the chat route has. */
@Controller(['v1', 'openai/v1'])
export class EmbeddingsController {
  constructor(private readonly handler: EmbeddingsHandler) {}

  @Post('embeddings')
  // 200, not POST's 201: OpenAI's status, and so what the document shows.
  @HttpCode(200)
  @ApiRoute({
    summary: 'Create embeddings (OpenAI-compatible)',
    tag: 'Embeddings',
    body: { schema: createEmbeddingSchema, required: true },
    ok: { description: 'One vector per input, in input order', json: embeddingList },
    errors: [400, 404, 413, 502, 504],
  })
  create(@Caller() caller: AuthContext, @Body() body: unknown, @Res() reply: FastifyReply): Promise<void> {
    return this.handler.handle(caller, body, reply);
  }
}
