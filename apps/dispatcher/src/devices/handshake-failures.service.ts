import { Inject, Injectable } from '@nestjs/common';
import { APP_CONFIG, FailureLimit, LOGGER, keys, REDIS } from '@app/common';
import type { AppConfig, Logger, RedisClient } from '@app/common';

/** The limiter's window: DEVICE_HANDSHAKE_FAILURES are counted per minute. */
const WINDOW_S = 60;

/**
 * Failed device handshakes per client address per minute, counted across every dispatcher in Redis
 * (FailureLimit, as the api counts failed authentications). An address that reaches
 * DEVICE_HANDSHAKE_FAILURES failures is refused whole until the window ends, before its token is
 * looked at: right tokens too, so that guessing stops and costs nothing more; a blocked address's
 * attempts cost no I/O at all, and a valid handshake pays nothing for the check.
 */
@Injectable()
export class HandshakeFailures {
  private readonly limit: FailureLimit;

  constructor(
    @Inject(REDIS) redis: RedisClient,
    @Inject(APP_CONFIG) config: AppConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {
    this.limit = new FailureLimit(redis, keys.deviceHandshakeFailures, config.DEVICE_HANDSHAKE_FAILURES, WINDOW_S);
  }

  /** How long the address must wait before its next handshake (ms; 0: it may try). In memory, no I/O. */
  wait(address: string): number {
    return this.limit.wait(address);
  }

  /**
   * Counts a failure from the address. Returns the wait when this failure was already over the limit
   * (counted elsewhere or at the same time), so that the refusal says so, else 0.
   */
  async failed(address: string): Promise<number> {
    const failure = await this.limit.failed(address);
    if (failure.started) {
      this.logger.warn({ address, ms: failure.heldMs }, 'failed device handshakes: address refused');
    }
    return failure.over ? failure.heldMs : 0;
  }
}
