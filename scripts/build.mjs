#!/usr/bin/env node
// Builds what the npm scripts run: the Prisma client (only when the schema changed), then the apps,
// libraries and bench with one incremental tsc into dist/, then rewrites the @app/common alias.
// Tests do not use this build: they run from the sources.
//
// When no input changed since the last successful build (dist/.build-stamp), it exits at once: even
// an incremental tsc takes seconds to find out that nothing changed, and `npm run cli` builds first.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const bin = (name) => join(root, 'node_modules', '.bin', name);
const run = (cmd, args) => execFileSync(cmd, args, { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] });
const STAMP = join(root, 'dist/.build-stamp');

/** The newest mtime under a path: files and directories (a removed or renamed file changes its directory's). */
function newest(path) {
  const info = statSync(path, { throwIfNoEntry: false });
  if (!info) {
    return 0;
  }
  if (!info.isDirectory()) {
    return info.mtimeMs;
  }
  let latest = info.mtimeMs;
  for (const entry of readdirSync(path, { withFileTypes: true })) {
    if (entry.name !== 'node_modules' && !entry.name.startsWith('.')) {
      latest = Math.max(latest, newest(join(path, entry.name)));
    }
  }
  return latest;
}

const inputs = [
  'apps',
  'web',
  'libs',
  'bench',
  'tools',
  'prisma/schema.prisma',
  'tsconfig.json',
  'tsconfig.build.json',
  'package-lock.json',
  'scripts/build.mjs',
  'scripts/generate.mjs',
];
const stamp = statSync(STAMP, { throwIfNoEntry: false });
if (stamp && inputs.every((input) => newest(join(root, input)) <= stamp.mtimeMs)) {
  process.exit(0);
}

run(process.execPath, [join(root, 'scripts/generate.mjs')]);
const started = Date.now();
try {
  run(bin('tsc'), ['-p', 'tsconfig.build.json']);
} catch (error) {
  process.stdout.write(error.stdout ?? '');
  process.exit(1);
}
run(bin('tsc-alias'), ['-p', 'tsconfig.build.json']);
// The dashboard's bundle, beside the apps: the api serves dist/dashboard at /dashboard.
run(process.execPath, [join(root, 'scripts/build-dashboard.mjs'), join(root, 'dist/dashboard')]);
// Stamped with the time the build started: a file saved during the build makes the next run build again.
if (existsSync(join(root, 'dist'))) {
  writeFileSync(STAMP, '');
  utimesSync(STAMP, started / 1000, started / 1000);
}
