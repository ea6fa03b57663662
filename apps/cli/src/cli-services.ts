import type { Pool } from 'pg';
import { AdminService, UsageService, createPool, createPrismaClient } from '@app/common';
import type { PrismaClient } from '@app/common';

/**
 * What a command works with, made on first use: one pg pool, and a Prisma client on it only for the
 * commands that use Prisma (a usage report needs plain SQL only).
 */
export class CliServices {
  private pool: Pool | undefined;
  private prisma: PrismaClient | undefined;

  constructor(private readonly databaseUrl: string) {}

  get admin(): AdminService {
    this.prisma ??= createPrismaClient(this.databaseUrl, this.pg());
    return new AdminService(this.prisma);
  }

  get usage(): UsageService {
    return new UsageService(this.pg());
  }

  private pg(): Pool {
    // Two connections at most: a command runs its statements one after another (Prisma may hold one for a transaction).
    this.pool ??= createPool(this.databaseUrl, 2);
    return this.pool;
  }

  async close(): Promise<void> {
    if (this.prisma) {
      // Ends the pool too (the adapter owns it).
      await this.prisma.$disconnect();
    } else if (this.pool && !this.pool.ending) {
      await this.pool.end();
    }
  }
}
