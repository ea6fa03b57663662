import type { Pool } from 'pg';
import type { AdminService } from '@app/common/admin/admin.service';
import type { AdminFleetService } from '@app/common/admin/fleet.service';
import type { UsageService } from '@app/common/usage/usage.service';
import type { RedisTarget } from '@app/common/config/config';
import type { RedisClient } from '@app/common/redis/redis';

/**
 * What a command works with, loaded and made on first use, on one small pg pool. The modules are
 * required here, by their own paths, rather than at the top, so that `--help` and a usage error load
 * nothing, and nothing loads the libs/common barrel (Nest, BullMQ, socket.io, ioredis) or Prisma's
 * client (the admin services run plain SQL): a command starts in a fraction of a second.
 */
export class CliServices {
  private pool: Pool | undefined;
  private redis: RedisClient | undefined;

  constructor(
    private readonly databaseUrl: string,
    private readonly redisTarget: RedisTarget,
  ) {}

  /** The admin services, whose changes the audit log names as this OS user's on this host (`cli:<user>@<host>`). */
  async admin(): Promise<AdminService> {
    const [{ AdminService }, { localActor }] = await Promise.all([
      import('@app/common/admin/admin.service'),
      import('@app/common/admin/audit'),
    ]);
    return new AdminService(await this.pg(), localActor());
  }

  async usage(): Promise<UsageService> {
    const { UsageService } = await import('@app/common/usage/usage.service');
    return new UsageService(await this.pg());
  }

  /** The live view (devices online, queues): Postgres and Redis, ioredis loaded only for these commands. */
  async fleet(): Promise<AdminFleetService> {
    const [{ AdminFleetService }, { sqlOf }, { connectRedis }] = await Promise.all([
      import('@app/common/admin/fleet.service'),
      import('@app/common/admin/sql'),
      import('@app/common/redis/redis'),
    ]);
    // A command is not a service: an unreachable Redis fails it after a few quick tries, not minutes.
    this.redis ??= connectRedis(this.redisTarget, 'commands', {
      maxRetriesPerRequest: 1,
      connectTimeout: 2_000,
      retryStrategy: (attempt) => (attempt > 2 ? null : 200),
      connectionName: 'switchyard-cli',
    });
    this.redis.on('error', () => undefined);
    return new AdminFleetService(sqlOf(await this.pg()), this.redis);
  }

  private async pg(): Promise<Pool> {
    const { createPool } = await import('@app/common/prisma/pool');
    // Two connections at most: a command runs its statements one after another (a transaction holds one).
    this.pool ??= createPool(this.databaseUrl, 2);
    return this.pool;
  }

  async close(): Promise<void> {
    this.redis?.disconnect();
    if (this.pool && !this.pool.ending) {
      await this.pool.end();
    }
  }
}
