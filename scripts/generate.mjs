#!/usr/bin/env node
// Generates the Prisma client (libs/common/src/prisma/generated) when the schema is newer than it.
// Quiet and fast when nothing changed, so that build, test and lint can all call it first.
import { execFileSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const schema = join(root, 'prisma/schema.prisma');
const generated = join(root, 'libs/common/src/prisma/generated/client.ts');
if (!existsSync(generated) || statSync(generated).mtimeMs < statSync(schema).mtimeMs) {
  // generate never runs the schema engine, but Prisma's CLI wants a path to one (it cannot download it here).
  execFileSync(join(root, 'node_modules', '.bin', 'prisma'), ['generate'], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'inherit'],
    env: {
      ...process.env,
      PRISMA_SCHEMA_ENGINE_BINARY: process.execPath,
      PRISMA_HIDE_UPDATE_MESSAGE: '1',
      PRISMA_GENERATE_NO_HINTS: '1',
    },
  });
}
