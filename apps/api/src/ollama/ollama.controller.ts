import { createHash } from 'node:crypto';
import { Body, Controller, Get, HttpCode, Post, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import { Public } from '../auth/access.decorator';
import { Caller } from '../auth/auth-context';
import type { AuthContext } from '../auth/auth-context';
import { ModelsService } from '../models/models.service';
import { setIgnoredParams } from '../common/ignored-params';
import { IntakeService } from '../intake/intake.service';
import { follow, respond } from '../responder/responder';
import { parseOllamaChat } from './ollama-chat.dto';
import { OllamaFormat, OllamaRenderer } from './ollama.renderer';

/** The Ollama API version Switchyard's /api routes follow (reported by /api/version). */
export const OLLAMA_COMPAT_VERSION = '0.12.0';

/**
 * Ollama's own API, so Ollama clients (ollama-js, ollama-python, Open WebUI) work with only the
 * host and a key changed. Errors come out as `{"error": "..."}` (see AllExceptionsFilter).
 */
@Controller('api')
export class OllamaController {
  constructor(
    private readonly intake: IntakeService,
    private readonly models: ModelsService,
  ) {}

  @Get('version')
  @Public()
  version() {
    return { version: OLLAMA_COMPAT_VERSION };
  }

  /**
   * The caller's enabled models in Ollama's format. Devices hold the weights, so size and digest
   * are placeholders: size 0, and a digest of the model id (stable, not of any file).
   */
  @Get('tags')
  async tags(@Caller() caller: AuthContext) {
    const rows = await this.models.listRows(caller.orgId);
    return {
      models: rows.map((m) => ({
        name: m.id,
        model: m.id,
        modified_at: m.createdAt.toISOString(),
        size: 0,
        digest: createHash('sha256').update(m.id).digest('hex'),
        details: {
          parent_model: '',
          format: '',
          family: '',
          families: null,
          parameter_size: '',
          quantization_level: '',
        },
      })),
    };
  }

  @Post('chat')
  @HttpCode(200)
  async chat(@Caller() caller: AuthContext, @Body() body: unknown, @Res() reply: FastifyReply): Promise<void> {
    const startedAt = performance.now();
    const request = parseOllamaChat(body);
    setIgnoredParams(reply, request.ignored);
    const { flight, headers } = await this.intake.start(caller, {
      ...request,
      includeUsage: false,
      api: 'ollama',
      requestId: reply.request.id,
    });
    void reply.headers(headers);
    if (!follow(reply, flight)) {
      return;
    }
    const render = new OllamaRenderer(request.model, flight.task.mode, flight.task.address, startedAt);
    await respond(reply, flight, new OllamaFormat(render), request.stream);
  }
}
