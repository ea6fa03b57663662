import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  probePostgres,
  probeRedis,
  startEmbeddedPostgres,
  startEmbeddedRedis,
} from '../../apps/cli/src/embedded/services';
import type { EmbeddedService } from '../../apps/cli/src/embedded/services';

/** The Postgres and Redis servers a test run uses, and what it started itself (stopped at the end). */
export interface TestStores {
  /** The Postgres server, without a database: the run's database is added to it. Null: TEST_DATABASE_URL. */
  postgres: string | null;
  /** The Redis server, without a database number. Null: TEST_REDIS_URL. */
  redis: string | null;
  embedded: EmbeddedService[];
  /** Removed at the end: the embedded Postgres's data. */
  scratch: string | null;
}

const DEFAULT_POSTGRES = 'postgresql://postgres@127.0.0.1:5432';
const DEFAULT_REDIS = 'redis://127.0.0.1:6379';

/** A server URL without its database (path). */
function serverOf(url: string): string {
  const server = new URL(url);
  server.pathname = '';
  return server.toString().replace(/\/$/, '');
}

const given = (name: string) => (process.env[name] ?? '') !== '';

/**
 * The servers of a test run: TEST_DATABASE_URL / TEST_REDIS_URL when set (fixed places, which must
 * answer); else the servers of DATABASE_URL / REDIS_URL (or the local defaults) when they answer, as
 * on CI; else, or with SWITCHYARD_EMBEDDED=1, servers of the run's own (an embedded Postgres with its
 * data in a temporary directory, a redis-server), so that `npm test` needs nothing but Node. Says in
 * one line which it used.
 */
export async function testStores(): Promise<TestStores> {
  const force = ['1', 'true'].includes(process.env.SWITCHYARD_EMBEDDED ?? '');
  const stores: TestStores = { postgres: null, redis: null, embedded: [], scratch: null };
  const said: string[] = [];
  try {
    if (!given('TEST_DATABASE_URL')) {
      const server = serverOf(process.env.DATABASE_URL || DEFAULT_POSTGRES);
      const problem = force ? 'SWITCHYARD_EMBEDDED' : await probePostgres(server);
      if (problem === null) {
        stores.postgres = server;
        said.push(`Postgres at ${new URL(server).host}`);
      } else {
        stores.scratch = await mkdtemp(join(tmpdir(), 'switchyard-test-'));
        // Run as root, Postgres runs as the postgres user, who must reach its data directory.
        await chmod(stores.scratch, 0o755);
        const pg = await startEmbeddedPostgres({ dataDir: join(stores.scratch, 'postgres') });
        stores.embedded.push(pg);
        stores.postgres = pg.url;
        said.push(`an embedded ${pg.description} (${problem})`);
      }
    }
    if (!given('TEST_REDIS_URL')) {
      const server = serverOf(process.env.REDIS_URL || DEFAULT_REDIS);
      const problem = force ? 'SWITCHYARD_EMBEDDED' : await probeRedis(server);
      if (problem === null) {
        stores.redis = server;
        said.push(`Redis at ${new URL(server).host}`);
      } else {
        const redis = await startEmbeddedRedis();
        stores.embedded.push(redis);
        stores.redis = redis.url;
        said.push(`an embedded ${redis.description} (${problem})`);
      }
    }
  } catch (error) {
    await stopTestStores(stores);
    throw error;
  }
  if (said.length > 0) {
    process.stdout.write(`\ntest run on ${said.join(' and ')}\n`);
  }
  return stores;
}

/** Stops what the run started and removes its data. */
export async function stopTestStores(stores: TestStores): Promise<void> {
  await Promise.all(stores.embedded.map((service) => service.stop().catch(() => undefined)));
  if (stores.scratch) {
    await rm(stores.scratch, { recursive: true, force: true });
  }
}
