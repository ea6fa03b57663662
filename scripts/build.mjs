#!/usr/bin/env node
// Builds what the npm scripts run: the Prisma client (only when the schema changed), then the apps,
// libraries and bench with one incremental tsc into dist/, then rewrites the @app/common alias.
// Quiet and fast when nothing changed. Tests do not use this build: they run from the sources.
import { execFileSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const bin = (name) => join(root, 'node_modules', '.bin', name);
const run = (cmd, args) => execFileSync(cmd, args, { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] });

run(process.execPath, [join(root, 'scripts/generate.mjs')]);
try {
  run(bin('tsc'), ['-p', 'tsconfig.build.json']);
} catch (error) {
  process.stdout.write(error.stdout ?? '');
  process.exit(1);
}
run(bin('tsc-alias'), ['-p', 'tsconfig.build.json']);
