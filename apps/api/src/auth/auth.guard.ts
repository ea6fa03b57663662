import { createHash, timingSafeEqual } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import type { ExecutionContext } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { AuthGuard as PassportAuthGuard } from '@nestjs/passport';
import type { FastifyRequest } from 'fastify';
import { APP_CONFIG, AppError } from '@app/common';
import type { AppConfig } from '@app/common';
import { ACCESS_KEY } from './access.decorator';
import type { Access } from './access.decorator';
import { LimitsService } from '../limits/limits.service';
import { ApiKeyService, invalidApiKey } from './api-key.service';
import type { AuthContext } from './auth-context';

const digest = (value: string) => createHash('sha256').update(value).digest();

/**
 * The global guard: every route needs an API key unless it is marked @Public() or @AdminOnly().
 * Bearer keys go through passport-http-bearer; `X-API-Key` is checked by the same key service.
 */
@Injectable()
export class AuthGuard extends PassportAuthGuard('bearer') {
  private readonly adminDigest: Buffer | null;

  constructor(
    private readonly reflector: Reflector,
    private readonly keys: ApiKeyService,
    private readonly limits: LimitsService,
    @Inject(APP_CONFIG) config: AppConfig,
  ) {
    super();
    this.adminDigest = config.ADMIN_TOKEN ? digest(config.ADMIN_TOKEN) : null;
  }

  override async canActivate(context: ExecutionContext): Promise<boolean> {
    const access =
      this.reflector.getAllAndOverride<Access | undefined>(ACCESS_KEY, [context.getHandler(), context.getClass()]) ??
      'api_key';
    const request = context.switchToHttp().getRequest<FastifyRequest & { user?: AuthContext }>();
    switch (access) {
      case 'public':
        return true;
      case 'admin':
        this.checkAdmin(request);
        return true;
      case 'api_key': {
        await this.limits.checkAuthAllowed(request.ip);
        try {
          return await this.authenticate(context, request);
        } catch (error) {
          if (error instanceof AppError && error.code === 'invalid_api_key') {
            await this.limits.recordAuthFailure(request.ip);
          }
          throw error;
        }
      }
    }
  }

  private async authenticate(
    context: ExecutionContext,
    request: FastifyRequest & { user?: AuthContext },
  ): Promise<boolean> {
    const authorization = request.headers.authorization;
    const headerKey = request.headers['x-api-key'];
    if (!/^bearer\s/i.test(authorization ?? '') && typeof headerKey === 'string') {
      request.user = await this.keys.authenticate(headerKey.trim());
      return true;
    }
    return (await super.canActivate(context)) as boolean;
  }

  override handleRequest<TUser = AuthContext>(err: unknown, user: unknown): TUser {
    // A failed lookup (database unreachable) is not a bad key: it surfaces as itself (503), never as a 401.
    if (err) {
      throw err instanceof Error ? err : new Error('authentication failed');
    }
    if (!user) {
      throw invalidApiKey();
    }
    return user as TUser;
  }

  private checkAdmin(request: FastifyRequest): void {
    if (!this.adminDigest) {
      throw new AppError('invalid_admin_token', 'The admin API is disabled: ADMIN_TOKEN is not set on this server.');
    }
    const match = /^Bearer\s+(\S+)\s*$/i.exec(request.headers.authorization ?? '');
    // Compare digests so that the comparison takes the same time whatever the token's length.
    if (!match || !timingSafeEqual(digest(match[1]), this.adminDigest)) {
      throw new AppError('invalid_admin_token', "Invalid admin token. Send 'Authorization: Bearer <ADMIN_TOKEN>'.");
    }
  }
}
