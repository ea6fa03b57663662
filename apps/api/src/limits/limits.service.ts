import { Inject, Injectable } from '@nestjs/common';
import { RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import { APP_CONFIG, AppError, REDIS, keys, taskLifetimeMs } from '@app/common';
import type { AppConfig, Logger, RedisClient } from '@app/common';
import { LOGGER } from '@app/common';
import { MetricsService } from '../metrics/metrics.service';
import { BudgetsService } from './budgets.service';
import type { Payer } from './budgets.service';

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

/** What a request holds of its org's limits while it is in flight. */
export interface Taken {
  /** Rate-limit headers to send with the answer (OpenAI's names). */
  headers: RateHeaders;
  concurrency: Slot;
  queued: Slot;
}

/**
 * Per-organization limits, enforced in Redis so that every api instance counts together: requests
 * per minute (rate-limiter-flexible), concurrent requests and queued jobs per model (sorted sets of
 * live task ids whose entries expire on their own if an api instance dies holding them). An org
 * without limits costs nothing; one with limits, one round trip for all of them.
 */
@Injectable()
export class LimitsService {
  private readonly rpmLimiters = new Map<number, RateLimiterRedis>();
  /** A slot is dropped this long after it was taken even if never released (a crashed api). */
  private readonly slotTtlMs: number;

  constructor(
    @Inject(REDIS) private readonly redis: RedisClient,
    @Inject(APP_CONFIG) config: AppConfig,
    private readonly metrics: MetricsService,
    @Inject(LOGGER) private readonly logger: Logger,
    private readonly budgets: BudgetsService,
  ) {
    this.redis.defineCommand('syAcquireSlot', { numberOfKeys: 1, lua: ACQUIRE_SLOT });
    // As long as a task may be in flight: a slot outlives no task that holds it.
    this.slotTtlMs = taskLifetimeMs(config);
  }

  private rpmLimiter(points: number): RateLimiterRedis {
    let limiter = this.rpmLimiters.get(points);
    if (!limiter) {
      limiter = new RateLimiterRedis({
        storeClient: this.redis,
        keyPrefix: keys.requestsPerMinute,
        points,
        duration: 60,
      });
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

  /**
   * Takes what a request needs of its org's limits, or throws the 429 (with the rate-limit headers
   * when the org has a requests-per-minute limit). The checks go out together: the monthly budgets
   * (BudgetsService), requests per minute, concurrency, queued jobs.
   */
  async take(payer: Payer & { limits: OrgLimits }, model: string, taskId: string): Promise<Taken> {
    const { orgId, limits } = payer;
    const [budget, rpm, concurrency, queued] = await Promise.allSettled([
      this.budgets.check(payer),
      this.takeRequest(orgId, limits),
      limits.concurrency === null
        ? NO_SLOT
        : this.acquire(keys.concurrencySlots(orgId), taskId, limits.concurrency, () =>
            this.tooMany(
              'concurrency',
              `Too many concurrent requests: your organization may run ${limits.concurrency} at once.`,
              1,
            ),
          ),
      limits.maxQueued === null
        ? NO_SLOT
        : this.acquire(keys.queuedSlots(orgId, model), taskId, limits.maxQueued, () =>
            this.tooMany(
              'queued',
              `Too many queued requests for '${model}': your organization may have ${limits.maxQueued} waiting.`,
              1,
            ),
          ),
    ]);
    const failure = [budget, rpm, concurrency, queued].find((r) => r.status === 'rejected');
    if (failure) {
      for (const slot of [concurrency, queued]) {
        if (slot.status === 'fulfilled') {
          slot.value.release();
        }
      }
      const reason = failure.reason as Error;
      if (reason instanceof AppError && rpm.status === 'fulfilled') {
        // A budget, concurrency or queue refusal still says where the org stands per minute.
        throw new AppError(reason.code, reason.message, reason.param, { ...rpm.value, ...reason.headers });
      }
      throw reason;
    }
    return {
      headers: (rpm as PromiseFulfilledResult<RateHeaders>).value,
      concurrency: (concurrency as PromiseFulfilledResult<Slot>).value,
      queued: (queued as PromiseFulfilledResult<Slot>).value,
    };
  }

  /** Counts one request against the org's requests per minute; returns the headers to send. */
  private async takeRequest(orgId: string, limits: OrgLimits): Promise<RateHeaders> {
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

  private async acquire(key: string, member: string, limit: number, refuse: () => AppError): Promise<Slot> {
    const now = Date.now();
    const taken = await (
      this.redis as unknown as {
        syAcquireSlot(key: string, now: number, expiry: number, limit: number, member: string): Promise<number>;
      }
    ).syAcquireSlot(key, now, now + this.slotTtlMs, limit, member);
    if (taken !== 1) {
      throw refuse();
    }
    let released = false;
    return {
      release: () => {
        if (!released) {
          released = true;
          this.redis.zrem(key, member).catch((err: unknown) =>
            // The slot expires on its own (slotTtlMs); until then it counts against the org.
            this.logger.warn({ err: (err as Error).message, key }, 'could not release a limit slot'),
          );
        }
      },
    };
  }
}
