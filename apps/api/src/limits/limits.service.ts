import { Inject, Injectable } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import { APP_CONFIG, AppError } from '@app/common';
import type { AppConfig } from '@app/common';
import { REDIS } from '../redis/redis.module';
import { MetricsService } from '../metrics/metrics.service';

/** An org's limits as the auth context carries them; null means unlimited. */
export interface OrgLimits {
  rpm: number | null;
  concurrency: number | null;
  maxQueued: number | null;
}

/** Rate-limit headers as OpenAI sends them, for the responses of a limited org. */
export type RateHeaders = Record<string, string>;

/**
 * Takes a slot in a set of live members, atomically: expired members (their api died) are dropped
 * first, then the member is added unless the set is full. Returns 1 when taken, 0 when full.
 */
const ACQUIRE_SLOT = `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZSCORE', KEYS[1], ARGV[4]) then return 1 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[4])
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
return 1`;

/** A held slot; release it once (idempotent). */
export interface Slot {
  release(): void;
}

const NO_SLOT: Slot = { release: () => undefined };

/**
 * Per-organization limits, enforced in Redis so that every api instance counts together:
 * requests per minute (rate-limiter-flexible), concurrent requests and queued jobs per model (sorted
 * sets of live task ids whose entries expire on their own if an api instance dies holding them).
 */
@Injectable()
export class LimitsService {
  private readonly rpmLimiters = new Map<number, RateLimiterRedis>();
  private readonly authFailures: RateLimiterRedis;
  /** A slot is dropped this long after it was taken even if never released (a crashed api). */
  private readonly slotTtlMs: number;

  constructor(
    @Inject(REDIS) private readonly redis: Redis,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    private readonly metrics: MetricsService,
  ) {
    this.redis.defineCommand('syAcquireSlot', { numberOfKeys: 1, lua: ACQUIRE_SLOT });
    this.authFailures = new RateLimiterRedis({
      storeClient: redis,
      keyPrefix: 'sy:rl:authfail',
      points: config.AUTH_FAILURES_PER_MINUTE,
      duration: 60,
    });
    this.slotTtlMs = config.QUEUE_TIMEOUT_MS + config.MAX_STREAM_MS + 60_000;
  }

  private rpmLimiter(points: number): RateLimiterRedis {
    let limiter = this.rpmLimiters.get(points);
    if (!limiter) {
      limiter = new RateLimiterRedis({ storeClient: this.redis, keyPrefix: 'sy:rl:rpm', points, duration: 60 });
      this.rpmLimiters.set(points, limiter);
    }
    return limiter;
  }

  private tooMany(kind: string, message: string, retryAfterS: number, headers: RateHeaders = {}): AppError {
    this.metrics.rateLimitRejections.inc({ kind });
    return new AppError('rate_limit_exceeded', message, null, {
      ...headers,
      'retry-after': String(Math.max(1, Math.ceil(retryAfterS))),
    });
  }

  /** Counts one request against the org's requests per minute; returns the headers to send. */
  async takeRequest(orgId: string, limits: OrgLimits): Promise<RateHeaders> {
    if (limits.rpm === null) {
      return {};
    }
    const headers = (res: RateLimiterRes): RateHeaders => ({
      'x-ratelimit-limit-requests': String(limits.rpm),
      'x-ratelimit-remaining-requests': String(Math.max(0, res.remainingPoints)),
      'x-ratelimit-reset-requests': `${Math.ceil(res.msBeforeNext / 1000)}s`,
    });
    try {
      return headers(await this.rpmLimiter(limits.rpm).consume(orgId));
    } catch (error) {
      if (error instanceof RateLimiterRes) {
        throw this.tooMany(
          'rpm',
          `Rate limit reached: ${limits.rpm} requests per minute for your organization. Try again later.`,
          error.msBeforeNext / 1000,
          headers(error),
        );
      }
      throw error;
    }
  }

  private async acquire(key: string, member: string, limit: number): Promise<boolean> {
    const now = Date.now();
    const taken = await (
      this.redis as unknown as {
        syAcquireSlot(key: string, now: number, expiry: number, limit: number, member: string): Promise<number>;
      }
    ).syAcquireSlot(key, now, now + this.slotTtlMs, limit, member);
    return taken === 1;
  }

  private slot(key: string, member: string): Slot {
    let released = false;
    return {
      release: () => {
        if (!released) {
          released = true;
          void this.redis.zrem(key, member).catch(() => undefined);
        }
      },
    };
  }

  /** A concurrent-request slot of the org for this task, or 429. */
  async takeConcurrency(orgId: string, limits: OrgLimits, taskId: string): Promise<Slot> {
    if (limits.concurrency === null) {
      return NO_SLOT;
    }
    const key = `sy:limit:concurrency:${orgId}`;
    if (!(await this.acquire(key, taskId, limits.concurrency))) {
      throw this.tooMany(
        'concurrency',
        `Too many concurrent requests: your organization may run ${limits.concurrency} at once.`,
        1,
      );
    }
    return this.slot(key, taskId);
  }

  /** A place among the org's queued jobs for this model, or 429 (a tenant cannot fill a shared queue). */
  async takeQueued(orgId: string, limits: OrgLimits, model: string, taskId: string): Promise<Slot> {
    if (limits.maxQueued === null) {
      return NO_SLOT;
    }
    const key = `sy:limit:queued:${orgId}:${model}`;
    if (!(await this.acquire(key, taskId, limits.maxQueued))) {
      throw this.tooMany(
        'queued',
        `Too many queued requests for '${model}': your organization may have ${limits.maxQueued} waiting.`,
        1,
      );
    }
    return this.slot(key, taskId);
  }

  /** Refuses a client address that failed authentication too often in the last minute. */
  async checkAuthAllowed(address: string): Promise<void> {
    // Fails open: with Redis unreachable, key checks (Postgres) still work for routes that need no Redis.
    const res = await this.authFailures.get(address).catch(() => null);
    if (res && res.consumedPoints >= this.config.AUTH_FAILURES_PER_MINUTE) {
      throw this.tooMany(
        'auth_failures',
        'Too many failed authentications from your address.',
        res.msBeforeNext / 1000,
      );
    }
  }

  async recordAuthFailure(address: string): Promise<void> {
    await this.authFailures.penalty(address, 1).catch(() => undefined);
  }
}
