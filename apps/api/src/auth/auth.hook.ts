import { createHash, timingSafeEqual } from 'node:crypto';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import type { FastifyRequest } from 'fastify';
import { AppError, LOGGER } from '@app/common';
import type { AppConfig, Logger } from '@app/common';
import { sendError } from '../common/all-exceptions.filter';
import { ApiKeyService, invalidApiKey } from './api-key.service';
import type { AuthContext } from './auth-context';
import { AuthFailures } from './auth-failures.service';
import { presentedAdminToken, presentedKey } from './credentials';
import { routeAccess, routeKey } from './route-access';

const digest = (value: string) => createHash('sha256').update(value).digest();

/** What the hook leaves on a request for the guard and the handlers. */
export type AuthenticatedRequest = FastifyRequest & { user?: AuthContext; admin?: boolean };

/**
 * Authentication as the first step of every request (a Fastify onRequest hook), before its body is
 * read: an unauthenticated client cannot make the api parse anything. Each route's access comes from
 * its controller's declaration (@Public, @AdminOnly, else an API key); the Nest guard then only checks
 * that the hook did its part. A failed credential counts against its address (AuthFailures).
 */
export function installAuthHook(app: NestFastifyApplication, config: AppConfig): void {
  const access = routeAccess(app);
  const keys = app.get(ApiKeyService);
  const failures = app.get(AuthFailures);
  const logger = app.get<Logger>(LOGGER);
  const adminDigest = config.ADMIN_TOKEN ? digest(config.ADMIN_TOKEN) : null;

  const checkAdmin = (request: FastifyRequest) => {
    if (!adminDigest) {
      throw new AppError('invalid_admin_token', 'The admin API is disabled: ADMIN_TOKEN is not set on this server.');
    }
    const token = presentedAdminToken(request);
    // Digests are compared, so that the comparison takes the same time whatever the token's length.
    if (token === null || !timingSafeEqual(digest(token), adminDigest)) {
      throw new AppError('invalid_admin_token', "Invalid admin token. Send 'Authorization: Bearer <ADMIN_TOKEN>'.");
    }
  };

  app
    .getHttpAdapter()
    .getInstance()
    .addHook('onRequest', async (request: AuthenticatedRequest, reply) => {
      const url = request.routeOptions.url;
      if (!url) {
        // No such route: the 404 needs no credentials.
        return;
      }
      const method = request.method === 'HEAD' ? 'GET' : request.method;
      const kind = access.get(routeKey(method, url)) ?? 'api_key';
      if (kind === 'public') {
        return;
      }
      try {
        if (kind === 'admin') {
          checkAdmin(request);
          request.admin = true;
        } else {
          const key = presentedKey(request);
          if (key === null) {
            throw invalidApiKey();
          }
          request.user = await keys.authenticate(key);
        }
      } catch (error) {
        const refused = error instanceof AppError && ['invalid_api_key', 'invalid_admin_token'].includes(error.code);
        const blocked = refused ? await failures.failed(kind, request.ip) : null;
        sendError(reply, request, blocked ?? error, logger);
        return reply;
      }
    });
}
