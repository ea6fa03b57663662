import type { Redis } from 'ioredis';
import { randomUUID } from 'node:crypto';
import { AppError, PrismaService, SpendCounter, createLogger, createRedis } from '@app/common';
import { BudgetReconciler } from '../../../apps/api/src/limits/budget-reconciler.service';
import { BudgetsService } from '../../../apps/api/src/limits/budgets.service';
import { LimitsService } from '../../../apps/api/src/limits/limits.service';
import type { OrgLimits } from '../../../apps/api/src/limits/limits.service';
import { MetricsService } from '../../../apps/api/src/metrics/metrics.service';
import { REDIS_URL } from '../../support/stack';
import { testConfig } from '../support/apps';

/**
 * The slot script of the organization limits (requests at once, queued per model) on the real Redis:
 * a slot per task up to the limit, counted once however often its task asks, given back on release,
 * and dropped on its own once its expiry passed (the api that held it died).
 */
describe('limit slots (api)', () => {
  let redis: Redis;
  let limits: LimitsService;
  let prisma: PrismaService;
  const config = testConfig();

  beforeAll(() => {
    redis = createRedis(REDIS_URL);
    prisma = new PrismaService(config);
    const logger = createLogger('test', 'silent');
    const metrics = new MetricsService();
    const spend = new SpendCounter(redis);
    const budgets = new BudgetsService(spend, metrics, new BudgetReconciler(prisma, spend, logger));
    limits = new LimitsService(redis, config, metrics, logger, budgets);
  });

  afterAll(async () => {
    jest.restoreAllMocks();
    redis.disconnect();
    await prisma.onApplicationShutdown();
  });

  const atOnce = (n: number): OrgLimits => ({ rpm: null, concurrency: n, maxQueued: null });
  const queued = (n: number): OrgLimits => ({ rpm: null, concurrency: null, maxQueued: n });

  /** An org's request through a key without budgets. */
  const payer = (orgId: string, limits: OrgLimits) => ({
    orgId,
    apiKeyId: randomUUID(),
    limits,
    budgets: { org: null, key: null },
  });

  /** The 429's code, or 'taken'. */
  async function ask(org: string, limit: OrgLimits, task: string, model = 'm') {
    try {
      await limits.take(payer(org, limit), model, task);
      return 'taken';
    } catch (error) {
      if (error instanceof AppError) {
        return error.code;
      }
      throw error;
    }
  }

  it('one slot per task up to the limit; a task asking again keeps its one slot; a release gives it back', async () => {
    const org = randomUUID();
    const first = await limits.take(payer(org, atOnce(2)), 'm', 't1');
    expect(await ask(org, atOnce(2), 't2')).toBe('taken');
    expect(await ask(org, atOnce(2), 't3')).toBe('rate_limit_exceeded');
    // Full, yet a task that holds a slot is not refused its own.
    expect(await ask(org, atOnce(2), 't1')).toBe('taken');
    expect(await ask(org, atOnce(2), 't3')).toBe('rate_limit_exceeded');
    first.concurrency.release();
    // The release is sent in the background: the next command on the connection follows it.
    expect(await ask(org, atOnce(2), 't3')).toBe('taken');
    // Another organization counts apart.
    expect(await ask(randomUUID(), atOnce(2), 't1')).toBe('taken');
  });

  it('queued slots count per model', async () => {
    const org = randomUUID();
    expect(await ask(org, queued(1), 'q1', 'model-a')).toBe('taken');
    expect(await ask(org, queued(1), 'q2', 'model-a')).toBe('rate_limit_exceeded');
    expect(await ask(org, queued(1), 'q2', 'model-b')).toBe('taken');
  });

  it("a slot never released lapses at its expiry: a dead api's requests stop counting", async () => {
    const org = randomUUID();
    expect(await ask(org, atOnce(1), 'held-by-a-dead-api')).toBe('taken');
    expect(await ask(org, atOnce(1), 'next')).toBe('rate_limit_exceeded');
    // Later than any task may live (queue wait, stream, margin): what the slot's expiry is set to.
    const later = Date.now() + config.QUEUE_TIMEOUT_MS + config.MAX_STREAM_MS + 61_000;
    jest.spyOn(Date, 'now').mockReturnValue(later);
    try {
      expect(await ask(org, atOnce(1), 'next')).toBe('taken');
    } finally {
      jest.restoreAllMocks();
    }
  });
});
