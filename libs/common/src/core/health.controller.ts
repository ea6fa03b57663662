import { Controller, Get, Inject, Res, applyDecorators } from '@nestjs/common';
import type { RedisClient } from '../redis/redis';
import type { Type } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import { readiness, redisReady } from '../health/readiness';
import { LOGGER } from '../logging/logger';
import type { Logger } from '../logging/logger';
import { PgService } from '../prisma/pg.service';
import type { CoreRoute } from './core-options';
import { HealthReport } from './health-report';
import { REDIS } from './redis-connections';

/**
 * `GET /healthz` and `GET /readyz`, the same in every process. A class per process, made here, so
 * that the decorators one process adds to its routes (the api's access and descriptions) are on its
 * class only: Nest keeps a route's metadata on its handler function.
 */
export function healthController(decorate: (route: CoreRoute) => MethodDecorator[]): Type {
  @Controller()
  class HealthController {
    constructor(
      @Inject(PgService) private readonly db: PgService,
      @Inject(REDIS) private readonly redis: RedisClient,
      @Inject(HealthReport) private readonly report: HealthReport,
      @Inject(LOGGER) private readonly logger: Logger,
    ) {}

    /** The process is up (and what its parts report, see HealthReport). */
    @Get('healthz')
    @applyDecorators(...decorate('healthz'))
    health() {
      return this.report.body();
    }

    /** Postgres answers, Redis answers and takes writes; 503 naming the one that does not (details go to the log). */
    @Get('readyz')
    @applyDecorators(...decorate('readyz'))
    async ready(@Res({ passthrough: true }) reply: FastifyReply) {
      const { ready, body } = await readiness(
        { postgres: () => this.db.sql('SELECT 1'), redis: () => redisReady(this.redis) },
        this.logger,
      );
      if (!ready) {
        void reply.code(503);
      }
      return body;
    }
  }
  return HealthController;
}
