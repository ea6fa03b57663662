import { Global, Module } from '@nestjs/common';
import { PgService } from './pg.service';
import { PrismaService } from './prisma.service';

/**
 * The Prisma client on its pg pool. PrismaService is also provided as PgService (the same instance,
 * the same pool), for what runs on plain SQL in every process (the core module's task repository,
 * record writer and readiness check).
 */
@Global()
@Module({
  providers: [PrismaService, { provide: PgService, useExisting: PrismaService }],
  exports: [PrismaService, PgService],
})
export class PrismaModule {}
