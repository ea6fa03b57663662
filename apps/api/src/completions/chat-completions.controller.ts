import { Body, Controller, Inject, Post, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import { APP_CONFIG, openAIError } from '@app/common';
import type { AppConfig } from '@app/common';
import { Caller } from '../auth/auth-context';
import type { AuthContext } from '../auth/auth-context';
import { setIgnoredParams } from '../common/ignored-params';
import { RelayService } from '../relay/relay.service';
import type { RelayedTask } from '../relay/relayed-task';
import { ChunkRenderer, CompletionAccumulator, completionId } from './chat-completion.renderer';
import { parseChatCompletion } from './create-chat-completion.dto';

/** A comment line this often keeps idle SSE connections (and the proxies between) open. */
const PING_INTERVAL_MS = 15_000;

@Controller('v1/chat')
export class ChatCompletionsController {
  constructor(
    private readonly relay: RelayService,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
  ) {}

  @Post('completions')
  async create(@Caller() caller: AuthContext, @Body() body: unknown, @Res() reply: FastifyReply): Promise<void> {
    const request = parseChatCompletion(body, this.config.DEFAULT_MODEL);
    setIgnoredParams(reply, request.ignored);
    const task = await this.relay.start(
      caller,
      {
        model: request.model,
        mode: request.mode,
        params: request.params,
        includeUsage: request.includeUsage,
        api: 'openai',
        stream: request.stream,
        requestId: reply.request.id,
      },
      reply,
    );
    if (!(await this.relay.follow(reply, task))) {
      return;
    }
    const meta = {
      id: completionId(),
      created: task.created,
      model: request.model,
      mode: task.mode,
      task_address: task.address,
    };
    if (request.stream) {
      await this.stream(reply, task, new ChunkRenderer(meta, request.includeUsage), request.params.n ?? 1);
      return;
    }
    const acc = new CompletionAccumulator(Boolean(request.params.logprobs));
    for await (const event of task.events()) {
      switch (event.type) {
        case 'delta':
          acc.add(event.choices);
          break;
        case 'done':
          await reply.code(200).send(acc.render(meta, event.finish_reasons, event.usage));
          return;
        case 'error':
          await reply.code(event.status).send(openAIError(event.status, event.message, event.code));
          return;
        case 'assigned':
        case 'requeued':
          break;
      }
    }
  }

  /**
   * Server-Sent Events. Nothing is sent until a device has the task, so that failing to find one
   * is still an HTTP error status; after that, a failure is an error event, never a silent end.
   */
  private async stream(reply: FastifyReply, task: RelayedTask, render: ChunkRenderer, n: number): Promise<void> {
    const raw = reply.raw;
    let open = false;
    let ping: NodeJS.Timeout | null = null;
    const openStream = () => {
      reply.hijack();
      raw.writeHead(200, {
        ...(reply.getHeaders() as Record<string, string>),
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-cache',
        connection: 'keep-alive',
        'x-accel-buffering': 'no',
      });
      raw.write(render.roles(n));
      open = true;
      ping = setInterval(() => raw.write(': ping\n\n'), PING_INTERVAL_MS);
    };
    try {
      for await (const event of task.events()) {
        switch (event.type) {
          case 'assigned':
            if (!open) {
              openStream();
            }
            break;
          case 'requeued':
            break;
          case 'delta':
            if (!open) {
              openStream();
            }
            raw.write(render.deltas(event.choices));
            break;
          case 'done':
            if (!open) {
              openStream();
            }
            raw.end(render.finish(event.finish_reasons, event.usage));
            return;
          case 'error':
            if (!open) {
              await reply.code(event.status).send(openAIError(event.status, event.message, event.code));
              return;
            }
            raw.end(render.error(event.status, event.code, event.message));
            return;
        }
      }
      if (open && !raw.writableEnded) {
        raw.end();
      }
    } finally {
      if (ping) {
        clearInterval(ping);
      }
    }
  }
}
