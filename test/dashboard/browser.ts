import { existsSync } from 'node:fs';
import { chromium } from 'playwright-core';
import type { Browser } from 'playwright-core';

/** Debian's chromium package: playwright-core drives it; no browser download is needed (or possible here). */
export const CHROMIUM = '/usr/bin/chromium';

/**
 * Starts Debian's chromium, headless. A machine without it fails the suite with the fix, never skips
 * it: `apt-get install -y chromium` (CI's .ci/run does it when chromium is missing).
 */
export async function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(
      `The dashboard tests need Debian's chromium at ${CHROMIUM}: run 'apt-get install -y chromium' ` +
        '(.ci/run installs it when it is missing).',
    );
  }
  // No sandbox: CI and the developers' machines run the tests as root, where chromium's sandbox cannot start.
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
}
