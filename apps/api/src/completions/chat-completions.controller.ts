import { Body, Controller, HttpCode, Inject, Injectable, Post, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import { APP_CONFIG } from '@app/common';
import type { AppConfig } from '@app/common';
import { Caller } from '../auth/auth-context';
import type { AuthContext } from '../auth/auth-context';
import { setIgnoredParams } from '../common/ignored-params';
import { IntakeService } from '../intake/intake.service';
import { ApiRoute } from '../openapi/api-route.decorator';
import { JobQueue } from '../queue/job-queue.service';
import { follow, respond } from '../responder/responder';
import { OpenAIFormat, completionId } from './chat-completion.renderer';
import { CHAT_COMPLETION_MEDIA, chatCompletion } from './chat-completion.responses';
import { chatCompletionSchema } from './chat-completion.schema';
import { ignoredParams, parseChatCompletion } from './create-chat-completion.dto';
import type { ParseOptions } from './create-chat-completion.dto';

/** Serves an OpenAI chat completion request; shared by /v1/chat/completions and its OpenGPU alias. */
@Injectable()
export class ChatCompletionsHandler {
  constructor(
    private readonly intake: IntakeService,
    private readonly queue: JobQueue,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
  ) {}

  async handle(caller: AuthContext, body: unknown, reply: FastifyReply, options: ParseOptions = {}): Promise<void> {
    // Before validation, so that a 400 carries the header too: the client learns of every ignored field at once.
    setIgnoredParams(reply, ignoredParams(body));
    const request = parseChatCompletion(body, this.config.DEFAULT_MODEL, options);
    const { flight, headers } = await this.intake.start(caller, {
      ...request,
      api: 'openai',
      requestId: reply.request.id,
    });
    void reply.headers(headers);
    if (!follow(reply, flight)) {
      return;
    }
    const meta = {
      id: completionId(),
      created: flight.created,
      model: request.model,
      mode: flight.task.mode,
      task_address: flight.task.address,
    };
    const format = new OpenAIFormat(
      meta,
      request.includeUsage,
      Boolean(request.params.logprobs),
      request.params.n ?? 1,
      caller.compat,
    );
    const { line, taskId } = flight.task;
    const queueStatus = request.includeQueueStatus ? () => this.queue.standing(line, taskId) : undefined;
    await respond(reply, flight, format, request.stream, queueStatus);
  }
}

@Controller(['v1/chat', 'openai/v1/chat'])
export class ChatCompletionsController {
  constructor(private readonly handler: ChatCompletionsHandler) {}

  @Post('completions')
  // 200, not POST's 201: what the responder writes, and so what the document shows.
  @HttpCode(200)
  @ApiRoute({
    summary: 'Create a chat completion (OpenAI-compatible)',
    tag: 'Chat',
    body: { schema: chatCompletionSchema, required: true },
    ok: {
      description:
        'The completion; with `stream: true`, Server-Sent Events of ChatCompletionChunk ending in `data: [DONE]`',
      json: chatCompletion,
      other: CHAT_COMPLETION_MEDIA,
    },
    errors: [400, 404, 413, 502, 504],
  })
  create(@Caller() caller: AuthContext, @Body() body: unknown, @Res() reply: FastifyReply): Promise<void> {
    return this.handler.handle(caller, body, reply);
  }
}
