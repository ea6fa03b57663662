import { Body, Controller, Get, HttpCode, Post, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import { Public } from '../auth/access.decorator';
import { Caller } from '../auth/auth-context';
import type { AuthContext } from '../auth/auth-context';
import { PresenceService } from '../intake/presence.service';
import { ModelsService } from '../models/models.service';
import { OllamaChatHandler } from './ollama-chat.handler';
import { ollamaDetails, ollamaDigest, parseShow, psEntry, showResponse } from './ollama-models';

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
    private readonly models: ModelsService,
    private readonly presence: PresenceService,
  ) {}

  @Get('version')
  @Public()
  version() {
    return { version: OLLAMA_COMPAT_VERSION };
  }

  /** The caller's enabled models in Ollama's format. */
  @Get('tags')
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
  async show(@Caller() caller: AuthContext, @Body() body: unknown) {
    const model = await this.models.get(caller.orgId, parseShow(body));
    const { features } = await this.presence.serving(caller.orgId, model.id, caller.network && model.network);
    return showResponse(model, features);
  }

  /** The enabled models with a device online for the caller (Ollama's "running" models). */
  @Get('ps')
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
  chat(@Caller() caller: AuthContext, @Body() body: unknown, @Res() reply: FastifyReply): Promise<void> {
    return this.chatHandler.handle(caller, body, reply);
  }
}
