import { Redis } from 'ioredis';
import { Client } from 'pg';
import { startEmbeddedPostgres } from './embedded-postgres';
import { startEmbeddedRedis } from './embedded-redis';
import type { EmbeddedService } from './embedded-service';

/** How long a probe waits for a server's answer. */
const PROBE_TIMEOUT_MS = 3_000;

/** Null when Postgres answers at `url` (through its `postgres` maintenance database), else why not. */
export async function probePostgres(url: string): Promise<string | null> {
  const admin = new URL(url);
  admin.pathname = '/postgres';
  const client = new Client({ connectionString: admin.toString(), connectionTimeoutMillis: PROBE_TIMEOUT_MS });
  try {
    await client.connect();
    await client.query('SELECT 1');
    return null;
  } catch (error) {
    return (error as Error).message || 'no answer';
  } finally {
    // Cleanup of a probe: its answer (or its error) is already the result.
    await client.end().catch(() => undefined);
  }
}

/** Null when Redis answers PING at `url`, else why not. */
export async function probeRedis(url: string): Promise<string | null> {
  // A plain client: the test run's global setup uses these probes too, outside Jest's module map (no
  // @app/common there).
  const redis = new Redis(url, {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectTimeout: PROBE_TIMEOUT_MS,
  });
  // The connection's own error says why (ECONNREFUSED …); connect() only says it closed.
  let cause: string | null = null;
  redis.on('error', (error: Error) => (cause ??= error.message));
  try {
    await redis.connect();
    await redis.ping();
    return null;
  } catch (error) {
    return cause ?? ((error as Error).message || 'no answer');
  } finally {
    redis.disconnect();
  }
}

/** What to use for one service: the server at a URL, or one started here. */
export interface ServiceChoice {
  /** The URL to use: the given one, or the embedded server's (without a database or database number). */
  url: string;
  /** The server started here, to stop at the end; null when the given URL answered. */
  embedded: EmbeddedService | null;
  /** Why the given URL was not used (its probe's error), or null. */
  unreachable: string | null;
}

/**
 * The server to use for one service: the one at `url` when it answers and `force` is off, else one
 * started here. `explicit`: the URL was set by the user, who then gets an error rather than a server
 * they did not ask for (unless `force`).
 */
export async function chooseService(
  what: 'Postgres' | 'Redis',
  url: string,
  opts: { explicit: boolean; force: boolean; start: () => Promise<EmbeddedService> },
): Promise<ServiceChoice> {
  if (opts.force) {
    const embedded = await opts.start();
    return { url: embedded.url, embedded, unreachable: null };
  }
  const unreachable = await (what === 'Postgres' ? probePostgres(url) : probeRedis(url));
  if (unreachable === null) {
    return { url, embedded: null, unreachable: null };
  }
  if (opts.explicit) {
    throw new Error(`${what} at ${url} does not answer (${unreachable})`);
  }
  const embedded = await opts.start();
  return { url: embedded.url, embedded, unreachable };
}

export { startEmbeddedPostgres, startEmbeddedRedis };
export type { EmbeddedService };
