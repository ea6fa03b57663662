import { createParamDecorator } from '@nestjs/common';
import type { ExecutionContext } from '@nestjs/common';
import { AppError } from '@app/common';
import type { AuditActor } from '@app/common';
import type { AuthenticatedRequest } from './auth.hook';

/**
 * Injects who calls an @AdminOnly route, as the audit log names them (the auth hook sets it: the admin
 * token's fingerprint, or the dashboard session's). Admin routes that change something pass it to the
 * admin services (`service.as(actor)`).
 */
export const AdminActor = createParamDecorator((_: unknown, ctx: ExecutionContext): AuditActor => {
  const actor = ctx.switchToHttp().getRequest<AuthenticatedRequest>().admin;
  if (!actor) {
    // The guard refuses such a request first; this keeps a handler from ever running without one.
    throw new AppError('invalid_admin_token', "Invalid admin token. Send 'Authorization: Bearer <ADMIN_TOKEN>'.");
  }
  return actor;
});
