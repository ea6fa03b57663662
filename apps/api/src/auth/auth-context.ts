import { createParamDecorator } from '@nestjs/common';
import type { ExecutionContext } from '@nestjs/common';

/** Who is calling: set on the request by the auth guard for every `api_key` route. */
export interface AuthContext {
  orgId: string;
  orgName: string;
  apiKeyId: string;
}

/** Injects the caller's {@link AuthContext} into a handler. */
export const Caller = createParamDecorator((_: unknown, ctx: ExecutionContext): AuthContext => {
  return ctx.switchToHttp().getRequest<{ user: AuthContext }>().user;
});
