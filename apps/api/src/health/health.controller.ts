import { Controller, Get, Inject, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import type { Redis } from 'ioredis';
import { PrismaService, openAIError } from '@app/common';
import { Public } from '../auth/access.decorator';
import { REDIS } from '../infra/redis.module';

/** Readiness must answer quickly even when a dependency hangs. */
const CHECK_TIMEOUT_MS = 1_500;

async function probe(check: () => Promise<unknown>): Promise<string> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${CHECK_TIMEOUT_MS} ms`)), CHECK_TIMEOUT_MS);
  });
  try {
    await Promise.race([check(), timeout]);
    return 'ok';
  } catch (error) {
    // Prisma's messages span lines with the call site first; the last line says what happened.
    const message = (error instanceof Error ? error.message : String(error)).trim().split('\n').pop() ?? '';
    return `unreachable: ${message.trim()}`;
  } finally {
    clearTimeout(timer);
  }
}

@Controller()
@Public()
export class HealthController {
  constructor(
    private readonly prisma: PrismaService,
    @Inject(REDIS) private readonly redis: Redis,
  ) {}

  /** The process is up. */
  @Get('healthz')
  health() {
    return { status: 'ok' };
  }

  /** Postgres and Redis answer; 503 naming the one that does not. */
  @Get('readyz')
  async ready(@Res({ passthrough: true }) reply: FastifyReply) {
    const [postgres, redis] = await Promise.all([
      probe(() => this.prisma.client.$queryRaw`SELECT 1`),
      probe(() => this.redis.ping()),
    ]);
    const checks = { postgres, redis };
    if (postgres === 'ok' && redis === 'ok') {
      return { status: 'ok', checks };
    }
    const failing = Object.entries(checks)
      .filter(([, v]) => v !== 'ok')
      .map(([k, v]) => `${k} ${v}`);
    void reply.code(503);
    return { ...openAIError(503, `not ready: ${failing.join('; ')}`, 'service_unavailable'), checks };
  }
}
