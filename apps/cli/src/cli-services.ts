import type { Pool } from 'pg';
import type { AdminService } from '@app/common/admin/admin.service';
import type { PrismaClient } from '@app/common/prisma/generated/client';
import type { UsageService } from '@app/common/usage/usage.service';

/**
 * What a command works with, loaded and made on first use: one pg pool, and a Prisma client on it only
 * for the commands that use Prisma. The modules are required here, by their own paths, rather than at
 * the top: `--help`, a usage error or a usage report never load Prisma's client, and nothing loads
 * the libs/common barrel (Nest, BullMQ, socket.io, ioredis): a command starts in a fraction of a second.
 */
export class CliServices {
  private pool: Pool | undefined;
  private prisma: PrismaClient | undefined;

  constructor(private readonly databaseUrl: string) {}

  async admin(): Promise<AdminService> {
    const [{ AdminService }, { createPrismaClient }] = await Promise.all([
      import('@app/common/admin/admin.service'),
      import('@app/common/prisma/client'),
    ]);
    this.prisma ??= createPrismaClient(this.databaseUrl, await this.pg());
    return new AdminService(this.prisma);
  }

  async usage(): Promise<UsageService> {
    const { UsageService } = await import('@app/common/usage/usage.service');
    return new UsageService(await this.pg());
  }

  private async pg(): Promise<Pool> {
    const { createPool } = await import('@app/common/prisma/pool');
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
