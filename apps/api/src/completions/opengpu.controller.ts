import { Body, Controller, HttpCode, Post, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import { Caller } from '../auth/auth-context';
import type { AuthContext } from '../auth/auth-context';
import { OllamaChatHandler } from '../ollama/ollama-chat.handler';
import { ChatCompletionsHandler } from './chat-completions.controller';

/**
 * The OpenGPU relay's paths, so that its clients can point at Switchyard unchanged: its "ollama
 * source" is /api/chat, its "vllm source" the OpenAI route in direct mode only. Same auth, same
 * bodies, same error shapes as the routes they alias (Ollama's under /v2/ollama/, see route-family).
 */
@Controller('v2')
export class OpenGpuController {
  constructor(
    private readonly chatCompletions: ChatCompletionsHandler,
    private readonly ollamaChat: OllamaChatHandler,
  ) {}

  @Post('ollama/api/chat')
  @HttpCode(200)
  ollama(@Caller() caller: AuthContext, @Body() body: unknown, @Res() reply: FastifyReply): Promise<void> {
    return this.ollamaChat.handle(caller, body, reply);
  }

  @Post('vllm/v1/chat/completions')
  vllm(@Caller() caller: AuthContext, @Body() body: unknown, @Res() reply: FastifyReply): Promise<void> {
    return this.chatCompletions.handle(caller, body, reply, { directOnly: true });
  }
}
