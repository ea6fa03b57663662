#!/usr/bin/env node
// `npm test`: prepares a test database and a Redis database of their own, then runs every unit spec
// (*.spec.js) and end-to-end suite (*.e2e-spec.js) from the build with Node's test runner.
// TEST_DATABASE_URL and TEST_REDIS_URL choose where; the defaults never touch the demo's data.
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { Redis } from 'ioredis';

/** No single test may take longer than this: a hang fails the test instead of stalling CI. */
const TEST_TIMEOUT_MS = 240_000;
const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const databaseUrl = process.env.TEST_DATABASE_URL ?? 'postgresql://postgres@127.0.0.1:5432/switchyard_test';
const redisUrl = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379/15';

async function resetDatabase() {
  const url = new URL(databaseUrl);
  const name = url.pathname.slice(1);
  url.pathname = '/postgres';
  const client = new pg.Client({ connectionString: url.toString() });
  await client.connect();
  await client.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
  await client.end();
  const migrate = spawnSync(process.execPath, [join(root, 'dist/apps/cli/src/migrate.js')], {
    env: { ...process.env, DATABASE_URL: databaseUrl },
    stdio: 'inherit',
  });
  if (migrate.status !== 0) {
    process.exit(migrate.status ?? 1);
  }
}

async function resetRedis() {
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
  await redis.flushdb();
  redis.disconnect();
}

function findTests(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      return entry.name === 'node_modules' ? [] : findTests(path);
    }
    return /\.(e2e-)?spec\.js$/.test(entry.name) ? [path] : [];
  });
}

await resetDatabase();
await resetRedis();
const only = process.argv.slice(2);
const files = findTests(join(root, 'dist'))
  .filter((f) => only.length === 0 || only.some((o) => f.includes(o)))
  .sort();
console.log(`running ${files.length} test files: ${files.map((f) => relative(join(root, 'dist'), f)).join(', ')}`);
const result = spawnSync(
  process.execPath,
  ['--test', '--test-concurrency=2', `--test-timeout=${TEST_TIMEOUT_MS}`, '--test-force-exit', ...files],
  {
    stdio: 'inherit',
    env: { ...process.env, DATABASE_URL: databaseUrl, REDIS_URL: redisUrl, SWITCHYARD_TEST: '1' },
  },
);
process.exit(result.status ?? 1);
