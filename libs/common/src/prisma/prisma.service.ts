import { Inject, Injectable } from '@nestjs/common';
import type { OnModuleDestroy } from '@nestjs/common';
import { PrismaPg } from '@prisma/adapter-pg';
import { APP_CONFIG } from '../config/config';
import type { AppConfig } from '../config/config';
import { PrismaClient } from './generated/client';

/** A Prisma client on the pg driver adapter (the Rust-free client). */
export function createPrismaClient(databaseUrl: string): PrismaClient {
  // A small pool: api and dispatcher make short queries; connection errors surface fast.
  return new PrismaClient({
    adapter: new PrismaPg({ connectionString: databaseUrl, max: 10, connectionTimeoutMillis: 5_000 }),
  });
}

/** The application's one Prisma client. */
@Injectable()
export class PrismaService implements OnModuleDestroy {
  readonly client: PrismaClient;

  constructor(@Inject(APP_CONFIG) config: AppConfig) {
    this.client = createPrismaClient(config.DATABASE_URL);
  }

  async onModuleDestroy(): Promise<void> {
    await this.client.$disconnect();
  }
}
