import { Controller, Get, Inject, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import type { Redis } from 'ioredis';
import { LOGGER, PrismaService, readiness, redisReady } from '@app/common';
import type { Logger } from '@app/common';
import { Public } from '../auth/access.decorator';
import { REDIS } from '../infra/redis.module';

@Controller()
@Public()
export class HealthController {
  constructor(
    private readonly prisma: PrismaService,
    @Inject(REDIS) private readonly redis: Redis,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  /** The process is up. */
  @Get('healthz')
  health() {
    return { status: 'ok' };
  }

  /** Postgres answers, Redis answers and takes writes; 503 naming the one that does not (details go to the log). */
  @Get('readyz')
  async ready(@Res({ passthrough: true }) reply: FastifyReply) {
    const { ready, body } = await readiness(
      { postgres: () => this.prisma.client.$queryRaw`SELECT 1`, redis: () => redisReady(this.redis) },
      this.logger,
    );
    if (!ready) {
      void reply.code(503);
    }
    return body;
  }
}
