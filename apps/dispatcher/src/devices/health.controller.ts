import { Controller, Get, Inject, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import type { Redis } from 'ioredis';
import { LOGGER, PgService, readiness, redisReady } from '@app/common';
import type { Logger } from '@app/common';
import { REDIS } from '../infra/redis.providers';
import { DeviceRegistry } from './device-registry.service';

@Controller()
export class HealthController {
  constructor(
    private readonly registry: DeviceRegistry,
    private readonly db: PgService,
    @Inject(REDIS) private readonly redis: Redis,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  /** The process is up; how many devices it holds. */
  @Get('healthz')
  health() {
    return { status: 'ok', devices: this.registry.size };
  }

  /** Postgres answers, Redis answers and takes writes; 503 naming the one that does not (details go to the log). */
  @Get('readyz')
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
