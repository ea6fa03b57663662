import type { Redis } from 'ioredis';
import { createLogger, createRedis } from '@app/common';
import { CoolingOff } from '../../../apps/dispatcher/src/devices/cooling-off.service';
import { REDIS_URL, uniq } from '../../support/stack';
import { testConfig } from '../support/apps';

/**
 * The cooling-off script on the real Redis: each disconnection of a device for its misdeeds counts,
 * and refuses it for the step of the schedule its count reaches (doubling, up to a cap); every
 * dispatcher reads the wait from Redis.
 */
describe('cooling-off (dispatcher)', () => {
  let redis: Redis;
  const firstMs = 1_000;
  const config = testConfig({ DEVICE_COOLING_OFF_MS: String(firstMs) });
  const logger = createLogger('test', 'silent');

  beforeAll(() => {
    redis = createRedis(REDIS_URL);
  });

  afterAll(() => redis.disconnect());

  it('doubles with each repeat up to 64 times the first, then stays there; another device is not concerned', async () => {
    const tokenKey = uniq('token-key');
    const steps: { ms: number; repeat: number }[] = [];
    for (let i = 0; i < 9; i++) {
      // A dispatcher each time: the count is in Redis, not in a process.
      steps.push(await new CoolingOff(redis, config, logger).begin(tokenKey, 'device-1'));
    }
    expect(steps).toEqual(
      [1, 2, 4, 8, 16, 32, 64, 64, 64].map((factor, i) => ({ ms: factor * firstMs, repeat: i + 1 })),
    );
    // A dispatcher that never refused the device reads its wait from Redis.
    const remaining = await new CoolingOff(redis, config, logger).remaining(tokenKey);
    expect(remaining).toBeGreaterThan(32 * firstMs);
    expect(remaining).toBeLessThanOrEqual(64 * firstMs);
    expect(await new CoolingOff(redis, config, logger).remaining(uniq('token-key'))).toBe(0);
    // Another device starts from the first step.
    expect(await new CoolingOff(redis, config, logger).begin(uniq('token-key'), 'device-2')).toEqual({
      ms: firstMs,
      repeat: 1,
    });
  });
});
