import { Body, Controller, Get, HttpCode, Post, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import { Public } from '../auth/access.decorator';
import { Caller } from '../auth/auth-context';
import type { AuthContext } from '../auth/auth-context';
import { PresenceService } from '../intake/presence.service';
import { ModelsService } from '../models/models.service';
import { ApiRoute } from '../openapi/api-route.decorator';
import { schema as ollamaChatSchema } from './ollama-chat.dto';
import { OllamaChatHandler } from './ollama-chat.handler';
import { embedSchema, embeddingsSchema } from './ollama-embed.dto';
import { OllamaEmbedHandler } from './ollama-embed.handler';
import { ollamaEmbed, ollamaEmbeddings } from './ollama-embed.responses';
import { ollamaDetails, ollamaDigest, parseShow, psEntry, showResponse, showSchema } from './ollama-models';
import { OLLAMA_CHAT_MEDIA, ollamaChat, ollamaPs, ollamaShow, ollamaTags, ollamaVersion } from './ollama.responses';

/** The Ollama API version Switchyard's /api routes follow (reported by /api/version). */
export const OLLAMA_COMPAT_VERSION = '0.12.0';

/**
 * Ollama's own API, so Ollama clients (ollama-js, ollama-python, Open WebUI) work with only the
 * host and a key changed. Errors come out as `{"error": "..."}` (see AllExceptionsFilter).
 */
@Controller('api')
export class OllamaController {
  constructor(
    private readonly chatHandler: OllamaChatHandler,
    private readonly embedHandler: OllamaEmbedHandler,
    private readonly models: ModelsService,
    private readonly presence: PresenceService,
  ) {}

  @Get('version')
  @Public()
  @ApiRoute({
    summary: 'Ollama API version',
    tag: 'Ollama',
    ok: { description: 'The version', json: ollamaVersion },
  })
  version() {
    return { version: OLLAMA_COMPAT_VERSION };
  }

  /** The caller's enabled models in Ollama's format. */
  @Get('tags')
  @ApiRoute({
    summary: 'List models (Ollama-compatible)',
    tag: 'Ollama',
    ok: { description: 'The models', json: ollamaTags },
  })
  async tags(@Caller() caller: AuthContext) {
    const rows = await this.models.listRows(caller.orgId);
    return {
      models: rows.map((m) => ({
        name: m.id,
        model: m.id,
        modified_at: m.createdAt.toISOString(),
        size: 0,
        digest: ollamaDigest(m.id),
        details: ollamaDetails(m.id),
      })),
    };
  }

  /** One enabled model: details from its id, capabilities from the devices online for it now. */
  @Post('show')
  @HttpCode(200)
  @ApiRoute({
    summary: 'Show a model (Ollama-compatible)',
    tag: 'Ollama',
    body: { schema: showSchema, required: true },
    ok: { description: 'The model', json: ollamaShow },
    errors: [400, 404],
  })
  async show(@Caller() caller: AuthContext, @Body() body: unknown) {
    const model = await this.models.get(caller.orgId, parseShow(body));
    const { features } = await this.presence.serving(caller.orgId, model.id, caller.network && model.network);
    return showResponse(model, features);
  }

  /** The enabled models with a device online for the caller (Ollama's "running" models). */
  @Get('ps')
  @ApiRoute({
    summary: 'Models with a device online (Ollama-compatible)',
    tag: 'Ollama',
    ok: { description: 'The models', json: ollamaPs },
  })
  async ps(@Caller() caller: AuthContext) {
    const rows = await this.models.listRows(caller.orgId);
    const online = await Promise.all(
      rows.map((m) => this.presence.serving(caller.orgId, m.id, caller.network && m.network)),
    );
    return {
      models: rows.flatMap((m, i) => {
        const until = online[i].until;
        return until !== null ? [psEntry(m, until)] : [];
      }),
    };
  }

  @Post('chat')
  @HttpCode(200)
  @ApiRoute({
    summary: 'Chat (Ollama-compatible)',
    tag: 'Ollama',
    body: { schema: ollamaChatSchema, required: true },
    ok: {
      description: 'The answer; with `stream: true`, NDJSON lines (done: false … then done: true)',
      json: ollamaChat,
      other: OLLAMA_CHAT_MEDIA,
    },
    errors: [400, 404, 413, 502, 504],
  })
  chat(@Caller() caller: AuthContext, @Body() body: unknown, @Res() reply: FastifyReply): Promise<void> {
    return this.chatHandler.handle(caller, body, reply);
  }

  @Post('embed')
  @HttpCode(200)
  @ApiRoute({
    summary: 'Embed inputs (Ollama-compatible)',
    tag: 'Ollama',
    body: { schema: embedSchema, required: true },
    ok: { description: 'One vector per input, in input order', json: ollamaEmbed },
    errors: [400, 404, 413, 502, 504],
  })
  embed(@Caller() caller: AuthContext, @Body() body: unknown, @Res() reply: FastifyReply): Promise<void> {
    return this.embedHandler.embed(caller, body, reply);
  }

  /** Ollama's older embedding route: one prompt, one vector. */
  @Post('embeddings')
  @HttpCode(200)
  @ApiRoute({
    summary: 'Embed one prompt (Ollama-compatible, the older route)',
    tag: 'Ollama',
    body: { schema: embeddingsSchema, required: true },
    ok: { description: 'The vector', json: ollamaEmbeddings },
    errors: [400, 404, 413, 502, 504],
  })
  embeddings(@Caller() caller: AuthContext, @Body() body: unknown, @Res() reply: FastifyReply): Promise<void> {
    return this.embedHandler.embeddings(caller, body, reply);
  }
}
