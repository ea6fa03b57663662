import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import pg from 'pg';
import { migrate } from '../../apps/cli/src/migrations/migrator';
import { projectPath } from '../../libs/common/src/paths/project-root';
import { CLAIM_TTL_MS, DB_MARKER, OWNER_KEY, TEST_ENV, testDatabaseName } from './test-env';
import type { TestRunState } from './test-env';
import { stopTestStores, testStores } from './test-stores';

/**
 * Prepares the places this run's medium and e2e tests use, and only those:
 *
 * - a Redis database of its own, claimed among databases 1-15 with an owner key that expires unless
 *   renewed (a crashed run frees its claim), and used only when it is empty or marked as a test
 *   database by an earlier run: a database holding anything else is never touched;
 * - a Postgres database paired with it (`switchyard_test_<n>`), dropped, created and migrated.
 *
 * The servers are those of DATABASE_URL and REDIS_URL (default: the local ones) when they answer,
 * else servers of the run's own (see testStores). TEST_DATABASE_URL and TEST_REDIS_URL choose fixed
 * places instead; the database's name must contain "test", and the Redis database must be empty or
 * marked. Runs in parallel (`npm test --
 * relay` in two shells) each claim their own pair, so neither drops what the other uses.
 */
export default async function globalSetup(): Promise<void> {
  if (process.env[TEST_ENV.run]) {
    // Both the medium and the e2e project ask for it; the first one did it.
    return;
  }
  const run = randomBytes(6).toString('hex');
  const stores = await testStores();
  try {
    const claimed = await claimRedis(run, stores.redis);
    const databaseUrl = process.env.TEST_DATABASE_URL ?? `${stores.postgres}/${testDatabaseName(claimed.index)}`;
    await resetDatabase(databaseUrl);

    process.env[TEST_ENV.run] = run;
    process.env[TEST_ENV.databaseUrl] = databaseUrl;
    process.env[TEST_ENV.redisUrl] = claimed.url;
    const heartbeat = setInterval(
      () => void claimed.redis.set(OWNER_KEY, run, 'PX', CLAIM_TTL_MS).catch(() => undefined),
      CLAIM_TTL_MS / 3,
    );
    heartbeat.unref();
    (globalThis as { __switchyardTest?: TestRunState }).__switchyardTest = {
      redis: claimed.redis,
      heartbeat,
      run,
      stores,
    };
  } catch (error) {
    await stopTestStores(stores);
    throw error;
  }
}

/**
 * Whether a Redis database may be flushed: empty but for the owner key just set, or marked as a
 * Switchyard test database.
 */
async function isTestDatabase(redis: Redis): Promise<boolean> {
  const size = await redis.dbsize();
  return size <= 1 || (await redis.exists(DB_MARKER)) === 1;
}

async function claimRedis(run: string, server: string | null): Promise<{ redis: Redis; url: string; index: number }> {
  const fixed = process.env.TEST_REDIS_URL;
  const candidates = fixed ? [fixed] : Array.from({ length: 15 }, (_, i) => `${server}/${i + 1}`);
  const refused: string[] = [];
  for (const url of candidates) {
    const redis = new Redis(url, { maxRetriesPerRequest: 1, lazyConnect: true });
    try {
      await redis.connect();
    } catch (error) {
      redis.disconnect();
      throw new Error(`test setup: Redis at ${url} does not answer (${(error as Error).message}); start it first`);
    }
    // The owner key is set before looking, so that two runs never both take the same database.
    const owned = (await redis.set(OWNER_KEY, run, 'PX', CLAIM_TTL_MS, 'NX')) === 'OK';
    if (owned) {
      if (await isTestDatabase(redis)) {
        // One transaction: the claim never lapses between the flush and the new owner key.
        await redis
          .multi()
          .flushdb()
          .set(DB_MARKER, 'switchyard test database: flushed by every test run that claims it')
          .set(OWNER_KEY, run, 'PX', CLAIM_TTL_MS)
          .exec();
        const index = Number(new URL(url).pathname.slice(1) || '0');
        return { redis, url, index };
      }
      await redis.del(OWNER_KEY);
      refused.push(`${url} (holds data that is not a test run's)`);
    } else {
      refused.push(`${url} (claimed by another test run)`);
    }
    redis.disconnect();
  }
  throw new Error(`test setup: no Redis database to use: ${refused.join('; ')}`);
}

/** Drops, creates and migrates the test database; refuses any database whose name lacks "test". */
async function resetDatabase(databaseUrl: string): Promise<void> {
  const url = new URL(databaseUrl);
  const name = decodeURIComponent(url.pathname.slice(1));
  if (!/test/i.test(name)) {
    throw new Error(`test setup: refusing to drop database '${name}': a test database's name contains "test"`);
  }
  url.pathname = '/postgres';
  const admin = new pg.Client({ connectionString: url.toString() });
  await admin.connect().catch((error: Error) => {
    throw new Error(`test setup: Postgres at ${url.host} does not answer (${error.message}); start it first`);
  });
  try {
    await admin.query(`DROP DATABASE IF EXISTS "${name.replaceAll('"', '""')}" WITH (FORCE)`);
  } finally {
    await admin.end();
  }
  await migrate(databaseUrl, projectPath('prisma/migrations'));
}
