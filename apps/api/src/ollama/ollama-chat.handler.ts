import { Injectable } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import type { AuthContext } from '../auth/auth-context';
import { setIgnoredParams } from '../common/ignored-params';
import { IntakeService } from '../intake/intake.service';
import { follow, respond } from '../responder/responder';
import { ollamaIgnoredParams, parseOllamaChat } from './ollama-chat.dto';
import { OllamaFormat, OllamaRenderer } from './ollama.renderer';

/** Serves an Ollama chat request; shared by /api/chat and its OpenGPU alias /v2/ollama/api/chat. */
@Injectable()
export class OllamaChatHandler {
  constructor(private readonly intake: IntakeService) {}

  async handle(caller: AuthContext, body: unknown, reply: FastifyReply): Promise<void> {
    const startedAt = performance.now();
    // Before validation, so that a 400 carries the header too.
    setIgnoredParams(reply, ollamaIgnoredParams(body));
    const request = parseOllamaChat(body);
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
    const render = new OllamaRenderer(
      request.model,
      flight.task.mode,
      flight.task.address,
      startedAt,
      () => flight.firstOutputAt,
    );
    await respond(reply, flight, new OllamaFormat(render), request.stream);
  }
}
