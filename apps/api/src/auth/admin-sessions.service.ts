import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { APP_CONFIG, AppError, REDIS, keys } from '@app/common';
import type { AppConfig, RedisClient } from '@app/common';

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

const key = (secret: string) => keys.adminSession(createHash('sha256').update(secret).digest('hex'));

/**
 * What a session keeps of the admin token that opened it: an HMAC keyed by the token, over a label of
 * its own (not a digest used anywhere else, and nothing the token can be read back from). Every api
 * instance with the same ADMIN_TOKEN computes the same one; a new token, another.
 */
export function tokenFingerprint(adminToken: string): string {
  return createHmac('sha256', adminToken).update('switchyard dashboard session v1').digest('hex');
}

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
 * kept, in Redis, so that every api instance knows it and signing out ends it everywhere at once. A
 * session is bound to the admin token it was opened with (its fingerprint is the session's value):
 * changing ADMIN_TOKEN ends every session opened with the old one, on each instance as it gets the new
 * token. Sessions are not deleted on a mismatch: while a new token rolls out, the instances still on
 * the old one keep their sessions.
 */
@Injectable()
export class AdminSessions {
  private readonly fingerprint: Buffer | null;

  constructor(
    @Inject(REDIS) private readonly redis: RedisClient,
    @Inject(APP_CONFIG) config: AppConfig,
  ) {
    this.fingerprint = config.ADMIN_TOKEN ? Buffer.from(tokenFingerprint(config.ADMIN_TOKEN)) : null;
  }

  async open(request: FastifyRequest, reply: FastifyReply): Promise<void> {
    if (!this.fingerprint) {
      throw new AppError('invalid_admin_token', 'The admin API is disabled: ADMIN_TOKEN is not set on this server.');
    }
    const secret = randomBytes(32).toString('base64url');
    await this.redis.set(key(secret), this.fingerprint.toString(), 'EX', SESSION_TTL_S);
    void reply.header('set-cookie', this.cookie(request, secret, SESSION_TTL_S));
  }

  async close(request: FastifyRequest, reply: FastifyReply): Promise<void> {
    const secret = sessionCookie(request);
    if (secret) {
      await this.redis.del(key(secret));
    }
    void reply.header('set-cookie', this.cookie(request, '', 0));
  }

  /** Whether the request carries a live session, opened with this server's admin token. */
  async valid(request: FastifyRequest): Promise<boolean> {
    const secret = sessionCookie(request);
    if (secret === null || !this.fingerprint) {
      return false;
    }
    let stored: string | null;
    try {
      stored = await this.redis.get(key(secret));
    } catch {
      throw new AppError('service_unavailable', 'Sessions cannot be checked: Redis is unreachable.');
    }
    const value = Buffer.from(stored ?? '');
    return value.length === this.fingerprint.length && timingSafeEqual(value, this.fingerprint);
  }

  private cookie(request: FastifyRequest, value: string, maxAge: number): string {
    // Secure when the operator reached us over TLS (directly, or through a proxy with TRUST_PROXY).
    const secure = request.protocol === 'https' ? '; Secure' : '';
    return `${SESSION_COOKIE}=${value}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${maxAge}${secure}`;
  }
}
