import globalSetup from './global-setup';
import { buildForTests } from './transpile';
import { TEST_ENV } from './test-env';

/**
 * The e2e tier also needs the processes it starts: the api, dispatcher, device agent and CLI are
 * transpiled from the sources into a directory of this run's own (never a stale build).
 */
export default async function globalSetupE2e(): Promise<void> {
  await globalSetup();
  if (!process.env[TEST_ENV.build]) {
    process.env[TEST_ENV.build] = await buildForTests(process.env[TEST_ENV.run]!);
  }
}
