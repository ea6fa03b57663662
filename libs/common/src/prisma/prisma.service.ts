import { Inject, Injectable } from '@nestjs/common';
import type { OnModuleDestroy } from '@nestjs/common';
import { PrismaPg } from '@prisma/adapter-pg';
import type { Pool, QueryResult } from 'pg';
import { APP_CONFIG } from '../config/config';
import { createPool } from './pg.service';
import type { AppConfig } from '../config/config';
import { PrismaClient } from './generated/client';

/** A Prisma client on the pg driver adapter (the Rust-free client). */
export function createPrismaClient(databaseUrl: string, pool: Pool = createPool(databaseUrl)): PrismaClient {
  return new PrismaClient({ adapter: new PrismaPg(pool, { disposeExternalPool: true }) });
}

/**
 * The application's one Prisma client, and the pg pool under it. The few statements that run for
 * every request (task insert, claim, first token, completion) go to the pool as plain SQL: through
 * the query builder they cost several times the CPU (bench profile). Everything else uses Prisma.
 */
@Injectable()
export class PrismaService implements OnModuleDestroy {
  readonly client: PrismaClient;
  readonly pool: Pool;

  constructor(@Inject(APP_CONFIG) config: AppConfig) {
    this.pool = createPool(config.DATABASE_URL);
    this.client = createPrismaClient(config.DATABASE_URL, this.pool);
  }

  /** A plain parameterised statement on the shared pool. */
  async sql<R extends object = Record<string, unknown>>(text: string, values: unknown[]): Promise<QueryResult<R>> {
    return this.pool.query<R>(text, values);
  }

  async onModuleDestroy(): Promise<void> {
    await this.client.$disconnect();
  }
}
