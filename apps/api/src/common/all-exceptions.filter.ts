import { Catch, Inject } from '@nestjs/common';
import type { ArgumentsHost, ExceptionFilter } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { LOGGER } from '@app/common';
import type { Logger } from '@app/common';
import { errorResponse } from './error-body';
import { routeFamily } from './route-family';

/** The one place where errors become responses: OpenAI's shape under /v1 and /admin, Ollama's under /api. */
@Catch()
export class AllExceptionsFilter implements ExceptionFilter {
  constructor(@Inject(LOGGER) private readonly logger: Logger) {}

  catch(exception: unknown, host: ArgumentsHost): void {
    const request = host.switchToHttp().getRequest<FastifyRequest>();
    const reply = host.switchToHttp().getResponse<FastifyReply>();
    sendError(reply, request, exception, this.logger);
  }
}

export function sendError(reply: FastifyReply, request: FastifyRequest, exception: unknown, logger: Logger): void {
  const { status, body, headers, unexpected } = errorResponse(exception, routeFamily(request.url), request.id);
  if (unexpected) {
    logger.error({ err: exception, requestId: request.id, url: request.url }, 'unexpected error');
  }
  if (reply.sent || reply.raw.headersSent) {
    return;
  }
  void reply.code(status).headers(headers).send(body);
}
