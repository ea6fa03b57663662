import type { FastifyReply, FastifyRequest } from 'fastify';
import { AppError } from '@app/common';
import type { Logger } from '@app/common';
import { sendError } from './all-exceptions.filter';
import { dropUnreadBody } from './request-body';

/**
 * Answers a request from an onRequest hook, before anything of its body is read: the error in the
 * route family's shape, and the body dropped unread (see dropUnreadBody). Returns the reply, as a
 * hook that answers must.
 */
export function refuseBeforeBody(
  request: FastifyRequest,
  reply: FastifyReply,
  error: unknown,
  logger: Logger,
): FastifyReply {
  dropUnreadBody(request, reply);
  sendError(reply, request, error, logger);
  return reply;
}

export const unknownUrl = () => new AppError('unknown_url', 'Unknown request URL. Please check the URL and method.');
