import type { Redis } from 'ioredis';
import type { TestStores } from './test-stores';
/**
 * What the global setup hands to the test workers, through the environment (workers start after it),
 * and the names it uses in Redis. Tests read the places through test/support/stack.ts.
 */
export const TEST_ENV = {
  run: 'SWITCHYARD_TEST_RUN',
  databaseUrl: 'SWITCHYARD_TEST_DATABASE_URL',
  redisUrl: 'SWITCHYARD_TEST_REDIS_URL',
  /** The e2e tier's processes, transpiled from the sources for this run. */
  build: 'SWITCHYARD_TEST_BUILD',
} as const;

/** Marks a Redis database as one that test runs may flush. */
export const DB_MARKER = 'switchyard:test-database';
/** The run that owns a Redis database now; expires unless the run renews it. */
export const OWNER_KEY = 'switchyard:test-run';
export const CLAIM_TTL_MS = 60_000;

/** What the global setup leaves for the teardown (on globalThis: both run in Jest's own process). */
export interface TestRunState {
  redis: Redis;
  heartbeat: NodeJS.Timeout;
  run: string;
  stores: TestStores;
}

export const testDatabaseName = (index: number) => `switchyard_test_${index}`;
