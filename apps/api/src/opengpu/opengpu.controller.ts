import { Body, Controller, HttpCode, Post, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import { Caller } from '../auth/auth-context';
import type { AuthContext } from '../auth/auth-context';
import { CHAT_COMPLETION_MEDIA, chatCompletion } from '../completions/chat-completion.responses';
import { chatCompletionSchema } from '../completions/chat-completion.schema';
import { ChatCompletionsHandler } from '../completions/chat-completions.controller';
import { schema as ollamaChatSchema } from '../ollama/ollama-chat.dto';
import { OllamaChatHandler } from '../ollama/ollama-chat.handler';
import { embedSchema, embeddingsSchema } from '../ollama/ollama-embed.dto';
import { OllamaEmbedHandler } from '../ollama/ollama-embed.handler';
import { ollamaEmbed, ollamaEmbeddings } from '../ollama/ollama-embed.responses';
import { OLLAMA_CHAT_MEDIA, ollamaChat } from '../ollama/ollama.responses';
import { ApiRoute } from '../openapi/api-route.decorator';

/**
 * The OpenGPU relay's paths, so that its clients can point at Switchyard unchanged: its "ollama
 * source" is /api/chat (and Ollama's embedding routes), its "vllm source" the OpenAI chat route in
 * direct mode only. Same auth, same bodies, same error shapes as the routes they alias (Ollama's under
 * /v2/ollama/, see route-family). A folder of its own because it stands on both chat APIs, which know
 * nothing of each other.
 */
@Controller('v2')
export class OpenGpuController {
  constructor(
    private readonly chatCompletions: ChatCompletionsHandler,
    private readonly ollamaChat: OllamaChatHandler,
    private readonly ollamaEmbed: OllamaEmbedHandler,
  ) {}

  @Post('ollama/api/chat')
  @HttpCode(200)
  @ApiRoute({
    summary: 'Chat, at the OpenGPU relay’s path (alias of /api/chat)',
    tag: 'Ollama',
    body: { schema: ollamaChatSchema, required: true },
    ok: { description: 'As /api/chat', json: ollamaChat, other: OLLAMA_CHAT_MEDIA },
    errors: [400, 404, 413, 502, 504],
  })
  ollama(@Caller() caller: AuthContext, @Body() body: unknown, @Res() reply: FastifyReply): Promise<void> {
    return this.ollamaChat.handle(caller, body, reply);
  }

  @Post('ollama/api/embed')
  @HttpCode(200)
  @ApiRoute({
    summary: 'Embed inputs, at the OpenGPU relay’s path (alias of /api/embed)',
    tag: 'Ollama',
    body: { schema: embedSchema, required: true },
    ok: { description: 'As /api/embed', json: ollamaEmbed },
    errors: [400, 404, 413, 502, 504],
  })
  embed(@Caller() caller: AuthContext, @Body() body: unknown, @Res() reply: FastifyReply): Promise<void> {
    return this.ollamaEmbed.embed(caller, body, reply);
  }

  @Post('ollama/api/embeddings')
  @HttpCode(200)
  @ApiRoute({
    summary: 'Embed one prompt, at the OpenGPU relay’s path (alias of /api/embeddings)',
    tag: 'Ollama',
    body: { schema: embeddingsSchema, required: true },
    ok: { description: 'As /api/embeddings', json: ollamaEmbeddings },
    errors: [400, 404, 413, 502, 504],
  })
  embeddings(@Caller() caller: AuthContext, @Body() body: unknown, @Res() reply: FastifyReply): Promise<void> {
    return this.ollamaEmbed.embeddings(caller, body, reply);
  }

  @Post('vllm/v1/chat/completions')
  // 200, not POST's 201: what the responder writes, and so what the document shows.
  @HttpCode(200)
  @ApiRoute({
    summary: 'Chat completion, at the OpenGPU relay’s vLLM path (direct mode only)',
    tag: 'Chat',
    body: { schema: chatCompletionSchema, required: true },
    ok: {
      description: 'As /v1/chat/completions, always in direct mode',
      json: chatCompletion,
      other: CHAT_COMPLETION_MEDIA,
    },
    errors: [400, 404, 413, 502, 504],
  })
  vllm(@Caller() caller: AuthContext, @Body() body: unknown, @Res() reply: FastifyReply): Promise<void> {
    return this.chatCompletions.handle(caller, body, reply, { directOnly: true });
  }
}
