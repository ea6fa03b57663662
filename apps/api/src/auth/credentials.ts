import type { FastifyRequest } from 'fastify';

/**
 * The API key a request presents, from `Authorization: Bearer <key>` or `X-API-Key: <key>` only:
 * never from the query string or the body (they end up in access logs and proxies).
 */
export function presentedKey(request: FastifyRequest): string | null {
  const authorization = request.headers.authorization;
  if (typeof authorization === 'string') {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
    if (match) {
      return match[1];
    }
    if (/^bearer\s*$/i.test(authorization)) {
      return '';
    }
  }
  const header = request.headers['x-api-key'];
  return typeof header === 'string' ? header.trim() : null;
}

/** The admin token a request presents (`Authorization: Bearer <token>`). */
export function presentedAdminToken(request: FastifyRequest): string | null {
  const match = /^Bearer\s+(\S+)\s*$/i.exec(request.headers.authorization ?? '');
  return match ? match[1] : null;
}
