import { Inject, Injectable } from '@nestjs/common';
import { APP_CONFIG, AppError, FailureLimit, REDIS, keys } from '@app/common';
import type { AppConfig, RedisClient } from '@app/common';
import { MetricsService } from '../metrics/metrics.service';

export type CredentialKind = 'api_key' | 'admin';

/** The limiter's window: AUTH_FAILURES_PER_MINUTE are counted per minute. */
const WINDOW_S = 60;

/**
 * Failed authentications per client address per minute, counted across every api instance in
 * Redis, for API keys and the admin token apart (FailureLimit). An address that reaches
 * AUTH_FAILURES_PER_MINUTE failures is refused whole, with 429, until the window ends: its right
 * credentials too, and before any lookup, so that a guesser learns nothing more and costs nothing
 * more (no key lookup, no comparison, no Redis); a valid request pays nothing for the check.
 */
@Injectable()
export class AuthFailures {
  private readonly limits: Record<CredentialKind, FailureLimit>;

  constructor(
    @Inject(REDIS) redis: RedisClient,
    @Inject(APP_CONFIG) config: AppConfig,
    private readonly metrics: MetricsService,
  ) {
    const limit = (prefix: string) => new FailureLimit(redis, prefix, config.AUTH_FAILURES_PER_MINUTE, WINDOW_S);
    this.limits = { api_key: limit(keys.apiKeyFailures), admin: limit(keys.adminTokenFailures) };
  }

  /**
   * The 429 to answer at once when the address is blocked for `kind` (in memory: no I/O), else null.
   * Called before the credential is looked at.
   */
  blocked(kind: CredentialKind, address: string): AppError | null {
    const ms = this.limits[kind].wait(address);
    return ms > 0 ? this.tooMany(kind, ms) : null;
  }

  /**
   * Counts a failure of `kind` from the address; returns the 429 to answer instead of the 401 when the
   * address was already over the limit (another instance blocked it). With Redis unreachable, the 401
   * goes out as it is.
   */
  async failed(kind: CredentialKind, address: string): Promise<AppError | null> {
    const failure = await this.limits[kind].failed(address);
    return failure.over ? this.tooMany(kind, failure.heldMs) : null;
  }

  private tooMany(kind: CredentialKind, ms: number): AppError {
    this.metrics.rateLimitRejections.inc({ kind: kind === 'admin' ? 'admin_auth_failures' : 'auth_failures' });
    return new AppError('rate_limit_exceeded', 'Too many failed authentications from your address.', null, {
      'retry-after': String(Math.max(1, Math.ceil(ms / 1000))),
    });
  }
}
