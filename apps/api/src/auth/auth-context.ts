import { createParamDecorator } from '@nestjs/common';
import type { ExecutionContext } from '@nestjs/common';
import type { MonthlyBudgets, OrgCompat } from '@app/common';
import type { OrgLimits } from '../limits/limits.service';

/** Who is calling: set on the request by the auth hook for every `api_key` route. */
export interface AuthContext {
  orgId: string;
  orgName: string;
  apiKeyId: string;
  /** The org's limits, as of the last key lookup (at most about a second old). */
  limits: OrgLimits;
  /** The org's and the key's monthly token budgets (null: none), as of the last key lookup. */
  budgets: MonthlyBudgets;
  /** Its share of a queue's assignments when several orgs wait (1-100). */
  weight: number;
  /** Whether its prompts may go to the shared network. */
  network: boolean;
  /** Whether a task of this org may be resumed on another device after output reached the client. */
  resume: boolean;
  /**
   * Which rules the OpenAI routes follow where OpenAI and the Nodea specification differ: docs/api.md,
   * "Compatibility" (`'openai'`, the default, or `'nodea'`).
   */
  compat: OrgCompat;
}

/** Injects the caller's {@link AuthContext} into a handler. */
export const Caller = createParamDecorator((_: unknown, ctx: ExecutionContext): AuthContext => {
  return ctx.switchToHttp().getRequest<{ user: AuthContext }>().user;
});
