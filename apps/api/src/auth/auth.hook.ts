import { createHash, timingSafeEqual } from 'node:crypto';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import type { FastifyRequest } from 'fastify';
import { AppError, LOGGER, adminTokenActor, dashboardActor } from '@app/common';
import type { AppConfig, AuditActor, Logger } from '@app/common';
import { refuseBeforeBody } from '../common/refuse';
import { AdminSessions, CSRF_HEADER, sessionCookie } from './admin-sessions.service';
import { ApiKeyService, invalidApiKey } from './api-key.service';
import type { AuthContext } from './auth-context';
import { AuthFailures } from './auth-failures.service';
import { presentedAdminToken, presentedKey } from './credentials';
import { routeAccess, routeKey } from './route-access';

const digest = (value: string) => createHash('sha256').update(value).digest();

/**
 * What the hook leaves on a request for the guard and the handlers: the tenant of an API key, or the
 * admin caller (as the audit log names them: never the token or the session id itself).
 */
export type AuthenticatedRequest = FastifyRequest & { user?: AuthContext; admin?: AuditActor };

/**
 * Authentication as the first step of every request (a Fastify onRequest hook), before its body is
 * read: an unauthenticated client cannot make the api parse anything. Each route's access comes from
 * its controller's declaration (@Public, @AdminOnly, else an API key); the Nest guard then only checks
 * that the hook did its part. A failed credential counts against its address, and an address over the
 * limit is refused before its credential is even looked at (AuthFailures).
 */
export function installAuthHook(app: NestFastifyApplication, config: AppConfig): void {
  const access = routeAccess(app);
  const keys = app.get(ApiKeyService);
  const failures = app.get(AuthFailures);
  const logger = app.get<Logger>(LOGGER);
  const sessions = app.get(AdminSessions);
  const adminDigest = config.ADMIN_TOKEN ? digest(config.ADMIN_TOKEN) : null;
  // Computed once: the token's name in the audit log.
  const tokenActor = config.ADMIN_TOKEN ? adminTokenActor(config.ADMIN_TOKEN) : null;

  /** Checks the admin credentials and answers who they are (the audit log's actor). */
  const checkAdmin = async (request: FastifyRequest): Promise<AuditActor> => {
    if (!adminDigest) {
      throw new AppError('invalid_admin_token', 'The admin API is disabled: ADMIN_TOKEN is not set on this server.');
    }
    const token = presentedAdminToken(request);
    // The dashboard's session cookie stands for the token, when no token is sent.
    if (token === null && sessionCookie(request) !== null) {
      const changes = !['GET', 'HEAD'].includes(request.method);
      if (changes && request.headers[CSRF_HEADER] !== '1') {
        throw new AppError(
          'invalid_admin_token',
          `A dashboard session must send '${CSRF_HEADER}: 1' to change anything.`,
        );
      }
      if (await sessions.valid(request)) {
        return dashboardActor(sessionCookie(request)!);
      }
      throw new AppError('invalid_admin_token', 'The dashboard session has expired or was ended: sign in again.');
    }
    // Digests are compared, so that the comparison takes the same time whatever the token's length.
    if (token === null || !timingSafeEqual(digest(token), adminDigest) || !tokenActor) {
      throw new AppError('invalid_admin_token', "Invalid admin token. Send 'Authorization: Bearer <ADMIN_TOKEN>'.");
    }
    return tokenActor;
  };

  app
    .getHttpAdapter()
    .getInstance()
    .addHook('onRequest', async (request: AuthenticatedRequest, reply) => {
      const url = request.routeOptions.url;
      if (!url) {
        // No such route: its 404 needs no credentials (common/unknown-route.hook.ts sends it).
        return;
      }
      const method = request.method === 'HEAD' ? 'GET' : request.method;
      const kind = access.get(routeKey(method, url)) ?? 'api_key';
      if (kind === 'public') {
        return;
      }
      const blocked = failures.blocked(kind, request.ip);
      if (blocked) {
        return refuseBeforeBody(request, reply, blocked, logger);
      }
      try {
        if (kind === 'admin') {
          request.admin = await checkAdmin(request);
        } else {
          const key = presentedKey(request);
          if (key === null) {
            throw invalidApiKey();
          }
          request.user = await keys.authenticate(key);
        }
      } catch (error) {
        const refused = error instanceof AppError && ['invalid_api_key', 'invalid_admin_token'].includes(error.code);
        const limited = refused ? await failures.failed(kind, request.ip) : null;
        return refuseBeforeBody(request, reply, limited ?? error, logger);
      }
    });
}
