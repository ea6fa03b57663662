import { PrismaPg } from '@prisma/adapter-pg';
import type { Pool } from 'pg';
import { PrismaClient } from './generated/client';
import { createPool } from './pool';

/** A Prisma client on the pg driver adapter (the Rust-free client). Free of Nest: the CLI loads it alone. */
export function createPrismaClient(databaseUrl: string, pool: Pool = createPool(databaseUrl)): PrismaClient {
  return new PrismaClient({ adapter: new PrismaPg(pool, { disposeExternalPool: true }) });
}
