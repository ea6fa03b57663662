import { Inject, Injectable } from '@nestjs/common';
import { APP_CONFIG } from '../config/config';
import type { AppConfig } from '../config/config';
import { createPrismaClient } from './client';
import type { PrismaClient } from './generated/client';
import { PgService } from './pg.service';

export { createPrismaClient };

/**
 * The application's one Prisma client, on the pg pool of {@link PgService}. The few statements that
 * run for every request (the task insert) go to the pool as plain SQL (`sql`): through the query
 * builder they cost several times the CPU (bench profile). Everything else uses Prisma.
 */
@Injectable()
export class PrismaService extends PgService {
  readonly client: PrismaClient;

  constructor(@Inject(APP_CONFIG) config: AppConfig) {
    super(config);
    this.client = createPrismaClient(config.DATABASE_URL, this.pool);
  }

  override async onApplicationShutdown(): Promise<void> {
    await this.client.$disconnect();
    // Not left to the adapter's disposeExternalPool alone: a pool left open keeps the process alive.
    await super.onApplicationShutdown();
  }
}
