import { TEST_ENV } from './test-env';

// Medium suites build Nest modules on the real Postgres and Redis; a hang fails the test instead of the run.
jest.setTimeout(60_000);

if (!process.env[TEST_ENV.databaseUrl] || !process.env[TEST_ENV.redisUrl]) {
  throw new Error('the medium tier needs its global setup (run it through jest.config.mjs)');
}
