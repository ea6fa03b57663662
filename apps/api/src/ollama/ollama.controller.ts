import { createHash } from 'node:crypto';
import { Body, Controller, Get, HttpCode, Post, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import { Public } from '../auth/access.decorator';
import { Caller } from '../auth/auth-context';
import type { AuthContext } from '../auth/auth-context';
import { ModelsService } from '../models/models.service';
import { setIgnoredParams } from '../common/ignored-params';
import { RelayService } from '../relay/relay.service';
import type { RelayedTask } from '../relay/relayed-task';
import { parseOllamaChat } from './ollama-chat.dto';
import { OllamaRenderer } from './ollama.renderer';

/** The Ollama API version Switchyard's /api routes follow (reported by /api/version). */
export const OLLAMA_COMPAT_VERSION = '0.12.0';

/**
 * Ollama's own API, so Ollama clients (ollama-js, ollama-python, Open WebUI) work with only the
 * host and a key changed. Errors come out as `{"error": "..."}` (see AllExceptionsFilter).
 */
@Controller('api')
export class OllamaController {
  constructor(
    private readonly relay: RelayService,
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
    const task = await this.relay.start(
      caller,
      {
        model: request.model,
        mode: request.mode,
        params: request.params,
        includeUsage: false,
        api: 'ollama',
        stream: request.stream,
        requestId: reply.request.id,
      },
      reply,
    );
    if (!(await this.relay.follow(reply, task))) {
      return;
    }
    const render = new OllamaRenderer(request.model, task.mode, task.address, startedAt);
    if (request.stream) {
      await this.stream(reply, task, render);
      return;
    }
    for await (const event of task.events()) {
      switch (event.type) {
        case 'assigned':
          render.assigned();
          break;
        case 'delta':
          render.delta(event.choices);
          break;
        case 'done':
          await reply.code(200).send(render.final(event.finish_reasons[0], event.usage));
          return;
        case 'error':
          await reply.code(event.status).send({ error: event.message });
          return;
        case 'requeued':
          break;
      }
    }
  }

  /** NDJSON, committed once a device has the task; a later failure is an `{"error"}` line, as Ollama does. */
  private async stream(reply: FastifyReply, task: RelayedTask, render: OllamaRenderer): Promise<void> {
    const raw = reply.raw;
    let open = false;
    const openStream = () => {
      reply.hijack();
      raw.writeHead(200, {
        ...(reply.getHeaders() as Record<string, string>),
        'content-type': 'application/x-ndjson',
        'cache-control': 'no-cache',
        'x-accel-buffering': 'no',
      });
      open = true;
    };
    for await (const event of task.events()) {
      switch (event.type) {
        case 'assigned':
          render.assigned();
          if (!open) {
            openStream();
          }
          break;
        case 'requeued':
          break;
        case 'delta': {
          if (!open) {
            openStream();
          }
          const line = render.delta(event.choices);
          if (line) {
            raw.write(line);
          }
          break;
        }
        case 'done':
          if (!open) {
            openStream();
          }
          raw.end(render.finalLine(event.finish_reasons[0], event.usage));
          return;
        case 'error':
          if (!open) {
            await reply.code(event.status).send({ error: event.message });
            return;
          }
          raw.end(render.line({ error: event.message }));
          return;
      }
    }
    if (open && !raw.writableEnded) {
      raw.end();
    }
  }
}
