#!/usr/bin/env node
// Builds what the npm scripts run: the Prisma client (only when the schema changed), then every
// app, library and test with one incremental tsc, then rewrites the @app/common alias.
// Quiet and fast when nothing changed, so `npm run cli` and `npm run device` can call it each time.
import { execFileSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const bin = (name) => join(root, 'node_modules', '.bin', name);
const run = (cmd, args, env = {}) =>
  execFileSync(cmd, args, { cwd: root, stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, ...env } });

const schema = join(root, 'prisma/schema.prisma');
const generated = join(root, 'libs/common/src/prisma/generated/client.ts');
if (!existsSync(generated) || statSync(generated).mtimeMs < statSync(schema).mtimeMs) {
  // generate never runs the schema engine, but Prisma's CLI wants a path to one (it cannot download it here).
  run(bin('prisma'), ['generate'], {
    PRISMA_SCHEMA_ENGINE_BINARY: process.execPath,
    PRISMA_HIDE_UPDATE_MESSAGE: '1',
    PRISMA_GENERATE_NO_HINTS: '1',
  });
}
try {
  run(bin('tsc'), ['-p', 'tsconfig.json']);
} catch (error) {
  process.stdout.write(error.stdout ?? '');
  process.exit(1);
}
run(bin('tsc-alias'), ['-p', 'tsconfig.json']);
