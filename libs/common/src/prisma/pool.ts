import { Pool } from 'pg';

/**
 * A small pool: api and dispatcher make short queries; connection errors surface fast. (A module of
 * its own, free of Nest, so that the CLI can load it alone.)
 */
export function createPool(databaseUrl: string, max = 10): Pool {
  const pool = new Pool({ connectionString: databaseUrl, max, connectionTimeoutMillis: 5_000 });
  pool.on('error', () => undefined);
  return pool;
}
