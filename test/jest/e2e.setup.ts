import { TEST_ENV } from './test-env';

// End-to-end tests start real processes on a 2-core machine shared with another suite; this bounds a
// hang, it does not time anything (speed is measured by `npm run bench`).
jest.setTimeout(240_000);

if (!process.env[TEST_ENV.build]) {
  throw new Error('the e2e tier needs its global setup (run it through jest.config.mjs)');
}
