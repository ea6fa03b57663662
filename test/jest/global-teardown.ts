import { rm } from 'node:fs/promises';
import { OWNER_KEY, TEST_ENV } from './test-env';
import type { TestRunState } from './test-env';
import { stopTestStores } from './test-stores';

/**
 * Frees this run's Redis database for the next run (its data stays until then, for a look after a
 * failure), stops the servers the run started for itself, and removes the e2e build.
 */
export default async function globalTeardown(): Promise<void> {
  const state = (globalThis as { __switchyardTest?: TestRunState }).__switchyardTest;
  if (state) {
    delete (globalThis as { __switchyardTest?: unknown }).__switchyardTest;
    clearInterval(state.heartbeat);
    if ((await state.redis.get(OWNER_KEY).catch(() => null)) === state.run) {
      await state.redis.del(OWNER_KEY).catch(() => undefined);
    }
    state.redis.disconnect();
    // The servers the run started for itself, if any, go with it.
    await stopTestStores(state.stores);
  }
  const build = process.env[TEST_ENV.build];
  if (build) {
    delete process.env[TEST_ENV.build];
    await rm(build, { recursive: true, force: true });
  }
}
