import { createHash, randomBytes } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Redis } from 'ioredis';
import { AppError } from '@app/common';
import { REDIS } from '../infra/redis.module';

/** The dashboard's session cookie. `__Host-` would forbid it on plain HTTP, which a loopback admin listener is. */
export const SESSION_COOKIE = 'sy_admin_session';
/** An operator signs in once a working day; a session left open longer must sign in again. */
export const SESSION_TTL_S = 12 * 3600;
/**
 * Header the dashboard sends with every request that changes something. A cross-site form cannot set
 * a header, and a cross-site script cannot without CORS (which the api never grants): with the
 * SameSite=Strict cookie, it keeps a session's actions to the dashboard's own pages.
 */
export const CSRF_HEADER = 'x-switchyard-csrf';

const key = (secret: string) => `sy:admin-session:${createHash('sha256').update(secret).digest('hex')}`;

/** The session id a request's cookie carries, if any. */
export function sessionCookie(request: FastifyRequest): string | null {
  for (const part of (request.headers.cookie ?? '').split(';')) {
    const [name, ...value] = part.trim().split('=');
    if (name === SESSION_COOKIE) {
      const secret = value.join('=');
      return /^[A-Za-z0-9_-]{43}$/.test(secret) ? secret : null;
    }
  }
  return null;
}

/**
 * Sessions of the dashboard: a random id in an HttpOnly, SameSite=Strict cookie; only its SHA-256 is
 * kept, in Redis, so that every api instance knows it and signing out ends it everywhere at once.
 */
@Injectable()
export class AdminSessions {
  constructor(@Inject(REDIS) private readonly redis: Redis) {}

  async open(request: FastifyRequest, reply: FastifyReply): Promise<void> {
    const secret = randomBytes(32).toString('base64url');
    await this.redis.set(key(secret), '1', 'EX', SESSION_TTL_S);
    void reply.header('set-cookie', this.cookie(request, secret, SESSION_TTL_S));
  }

  async close(request: FastifyRequest, reply: FastifyReply): Promise<void> {
    const secret = sessionCookie(request);
    if (secret) {
      await this.redis.del(key(secret));
    }
    void reply.header('set-cookie', this.cookie(request, '', 0));
  }

  /** Whether the request carries a live session. */
  async valid(request: FastifyRequest): Promise<boolean> {
    const secret = sessionCookie(request);
    if (secret === null) {
      return false;
    }
    try {
      return (await this.redis.exists(key(secret))) === 1;
    } catch {
      throw new AppError('service_unavailable', 'Sessions cannot be checked: Redis is unreachable.');
    }
  }

  private cookie(request: FastifyRequest, value: string, maxAge: number): string {
    // Secure when the operator reached us over TLS (directly, or through a proxy with TRUST_PROXY).
    const secure = request.protocol === 'https' ? '; Secure' : '';
    return `${SESSION_COOKIE}=${value}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${maxAge}${secure}`;
  }
}
