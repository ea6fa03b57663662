import { Inject, Injectable } from '@nestjs/common';
import { APP_CONFIG, Holds, LOGGER, keys, REDIS } from '@app/common';
import type { AppConfig, Logger, RedisClient } from '@app/common';
import { FORGIVE_AFTER_MS, coolingOffSchedule } from './cooling-off-schedule';

/**
 * Starts a cooling-off: counts the device's disconnection, and refuses it for the step of the schedule
 * (ARGV[3…]) that count reaches. The count outlives the cooling-off by the forgiveness period
 * (ARGV[2]). KEYS[1]: the cooling-off (value: the device id), KEYS[2]: the count, in one slot.
 */
const BEGIN_LUA = `local n = redis.call('INCR', KEYS[2])
local ms = tonumber(ARGV[math.min(n, #ARGV - 2) + 2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ms)
redis.call('PEXPIRE', KEYS[2], ms + tonumber(ARGV[2]))
return {n, ms}`;

/**
 * Devices disconnected for their misdeeds wait before they may connect again, on every dispatcher:
 * the cooling-off lives in Redis, by the device's token key, so that it is checked before any lookup.
 * It doubles with each repeat (cooling-off-schedule.ts) and is forgotten after a quiet hour. A
 * dispatcher that refused a device once keeps the rest of its wait in memory: a reconnect storm
 * costs it no I/O.
 */
@Injectable()
export class CoolingOff {
  private readonly schedule: number[];
  private readonly held = new Holds();
  /** Cooling-offs being started: a handshake of the device waits for the length Redis gives it. */
  private readonly starting = new Map<string, Promise<unknown>>();

  constructor(
    @Inject(REDIS) private readonly redis: RedisClient,
    @Inject(APP_CONFIG) config: AppConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {
    this.schedule = coolingOffSchedule(config.DEVICE_COOLING_OFF_MS);
  }

  /**
   * How long the device with this token key must still wait (ms; 0: it may connect). One Redis
   * command unless this dispatcher already refused it; fails open when Redis does not answer.
   */
  async remaining(tokenKey: string): Promise<number> {
    await this.starting.get(tokenKey)?.catch(() => undefined);
    const held = this.held.remaining(tokenKey);
    if (held > 0) {
      return held;
    }
    const ms = await this.redis.pttl(keys.deviceCoolingOff(tokenKey)).catch((err: unknown) => {
      this.logger.warn({ err: (err as Error).message }, 'could not check a device for a cooling-off; letting it in');
      return -2;
    });
    if (ms <= 0) {
      return 0;
    }
    this.held.hold(tokenKey, ms);
    return ms;
  }

  /** Starts the device's next cooling-off; resolves with its length and how many it has had lately. */
  async begin(tokenKey: string, deviceId: string): Promise<{ ms: number; repeat: number }> {
    const started = this.redis.eval(
      BEGIN_LUA,
      2,
      keys.deviceCoolingOff(tokenKey),
      keys.deviceStrikeOuts(tokenKey),
      deviceId,
      FORGIVE_AFTER_MS,
      ...this.schedule,
    ) as Promise<[number, number]>;
    this.starting.set(tokenKey, started);
    try {
      const [repeat, ms] = await started;
      this.held.hold(tokenKey, ms);
      return { ms, repeat };
    } catch (err) {
      // Redis did not answer: this dispatcher refuses the device for the first step at least.
      this.held.hold(tokenKey, this.schedule[0]);
      throw err;
    } finally {
      if (this.starting.get(tokenKey) === started) {
        this.starting.delete(tokenKey);
      }
    }
  }
}
