import { rm } from 'node:fs/promises';
import type { Redis } from 'ioredis';
import { OWNER_KEY, TEST_ENV } from './test-env';

/**
 * Frees this run's Redis database for the next run (its data stays until then, for a look after a
 * failure) and removes the e2e build.
 */
export default async function globalTeardown(): Promise<void> {
  const state = (globalThis as { __switchyardTest?: { redis: Redis; heartbeat: NodeJS.Timeout; run: string } })
    .__switchyardTest;
  if (state) {
    delete (globalThis as { __switchyardTest?: unknown }).__switchyardTest;
    clearInterval(state.heartbeat);
    if ((await state.redis.get(OWNER_KEY).catch(() => null)) === state.run) {
      await state.redis.del(OWNER_KEY).catch(() => undefined);
    }
    state.redis.disconnect();
  }
  const build = process.env[TEST_ENV.build];
  if (build) {
    delete process.env[TEST_ENV.build];
    await rm(build, { recursive: true, force: true });
  }
}
