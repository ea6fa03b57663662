import { Injectable } from '@nestjs/common';
import type { CanActivate, ExecutionContext } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { AppError } from '@app/common';
import { ACCESS_KEY } from './access.decorator';
import type { Access } from './access.decorator';
import { invalidApiKey } from './api-key.service';
import type { AuthenticatedRequest } from './auth.hook';

/**
 * The global guard: every route needs an API key unless it is marked @Public() or @AdminOnly(). The
 * credentials were checked by the auth hook before the body was read (auth.hook.ts); this makes sure
 * no route is reached without it, whatever the hook saw.
 */
@Injectable()
export class AuthGuard implements CanActivate {
  constructor(private readonly reflector: Reflector) {}

  canActivate(context: ExecutionContext): boolean {
    const access =
      this.reflector.getAllAndOverride<Access | undefined>(ACCESS_KEY, [context.getHandler(), context.getClass()]) ??
      'api_key';
    const request = context.switchToHttp().getRequest<AuthenticatedRequest>();
    switch (access) {
      case 'public':
        return true;
      case 'admin':
        if (!request.admin) {
          throw new AppError('invalid_admin_token', "Invalid admin token. Send 'Authorization: Bearer <ADMIN_TOKEN>'.");
        }
        return true;
      case 'api_key':
        if (!request.user) {
          throw invalidApiKey();
        }
        return true;
    }
  }
}
