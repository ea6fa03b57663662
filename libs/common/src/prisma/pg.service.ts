import { Global, Inject, Injectable, Module } from '@nestjs/common';
import type { OnApplicationShutdown } from '@nestjs/common';
import type { Pool, QueryResult } from 'pg';
import { APP_CONFIG } from '../config/config';
import type { AppConfig } from '../config/config';
import { createPool } from './pool';

export { createPool };

/**
 * Plain SQL on a pg pool. The dispatcher uses nothing else: its statements are few, fixed and on
 * every request's path, and without Prisma the process neither loads nor runs its query engine
 * (memory, CPU; see docs/benchmarks.md). PrismaService builds on it. The schema and migrations stay
 * Prisma's.
 */
@Injectable()
export class PgService implements OnApplicationShutdown {
  readonly pool: Pool;

  constructor(@Inject(APP_CONFIG) config: AppConfig) {
    this.pool = createPool(config.DATABASE_URL);
  }

  async sql<R extends object = Record<string, unknown>>(text: string, values: unknown[] = []): Promise<QueryResult<R>> {
    return this.pool.query<R>(text, values);
  }

  /** Closed last, when every service that writes has stopped (they stop in earlier shutdown hooks). */
  async onApplicationShutdown(): Promise<void> {
    if (!this.pool.ending) {
      await this.pool.end();
    }
  }
}

@Global()
@Module({ providers: [PgService], exports: [PgService] })
export class PgModule {}
