import { Inject, Injectable } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import { APP_CONFIG, AppError } from '@app/common';
import type { AppConfig } from '@app/common';
import { REDIS } from '../infra/redis.module';
import { MetricsService } from '../metrics/metrics.service';

export type CredentialKind = 'api_key' | 'admin';

/**
 * Failed authentications per client address per minute, counted across every api instance in
 * Redis, for API keys and the admin token apart. Only failing credentials are refused: after
 * AUTH_FAILURES_PER_MINUTE failures from an address, a wrong key gets 429 instead of 401, while a
 * valid key from that address (behind a load balancer, other tenants) keeps working, and a valid
 * request never pays for the count.
 */
@Injectable()
export class AuthFailures {
  private readonly limiters: Record<CredentialKind, RateLimiterRedis>;

  constructor(
    @Inject(REDIS) redis: Redis,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    private readonly metrics: MetricsService,
  ) {
    const limiter = (keyPrefix: string) =>
      new RateLimiterRedis({ storeClient: redis, keyPrefix, points: config.AUTH_FAILURES_PER_MINUTE, duration: 60 });
    this.limiters = { api_key: limiter('sy:rl:authfail'), admin: limiter('sy:rl:adminfail') };
  }

  /**
   * Counts a failure of `kind` from the address; returns the 429 to answer instead of the 401 when the
   * address is over its allowance. Fails open: with Redis unreachable, the 401 goes out as it is.
   */
  async failed(kind: CredentialKind, address: string): Promise<AppError | null> {
    const res = await this.limiters[kind].penalty(address, 1).catch(() => null);
    if (!res || res.consumedPoints <= this.config.AUTH_FAILURES_PER_MINUTE) {
      return null;
    }
    this.metrics.rateLimitRejections.inc({ kind: kind === 'admin' ? 'admin_auth_failures' : 'auth_failures' });
    return new AppError('rate_limit_exceeded', 'Too many failed authentications from your address.', null, {
      'retry-after': String(Math.max(1, Math.ceil(res.msBeforeNext / 1000))),
    });
  }
}
