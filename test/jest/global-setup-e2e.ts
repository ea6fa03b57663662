import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { projectPath } from '../../libs/common/src/paths/project-root';
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
    // The dashboard's bundle, where the api of that build looks for it (dashboard/ beside apps/).
    execFileSync(
      process.execPath,
      [projectPath('scripts/build-dashboard.mjs'), join(process.env[TEST_ENV.build]!, 'dashboard')],
      {
        stdio: 'inherit',
      },
    );
  }
}
