import type { RedisClient } from '../redis/redis';
import { openAIError } from '../errors/app-error';
import type { Logger } from '../logging/logger';
import { keys } from '../redis/keys';

/** Readiness must answer quickly even when a dependency hangs. */
export const READINESS_CHECK_TIMEOUT_MS = 1_500;

/** The dependencies /readyz checks, by the names it reports. */
export type Dependency = 'postgres' | 'redis';

export interface Readiness {
  ready: boolean;
  /** `{"status":"ok","checks":…}`, or the OpenAI error shape with the same `checks`. */
  body: Record<string, unknown>;
}

/** A dependency that answers but cannot do its job: its report says how (instead of `unreachable`). */
export class DependencyImpaired extends Error {
  constructor(
    readonly state: string,
    readonly detail: unknown,
  ) {
    super(state);
  }
}

/**
 * Redis answers and takes writes. A Redis over `maxmemory` with `noeviction` (or a read-only replica)
 * still answers PING while it refuses every task, job and stream write: that is not ready.
 */
export async function redisReady(redis: RedisClient): Promise<void> {
  await redis.ping();
  if (redis.isCluster) {
    // Every slot has a master that answers (a master just lost and not yet replaced fails this).
    const info = String(await redis.cluster('INFO'));
    if (!/cluster_state:ok/.test(info)) {
      throw new Error('the Redis Cluster is not ok (cluster_state)');
    }
  }
  try {
    await redis.set(keys.readinessProbe, '1', 'PX', 10_000);
  } catch (err) {
    throw new DependencyImpaired('refuses_writes', err);
  }
}

/** Resolves with null when the check passes in time, else with what went wrong. */
async function probe(check: () => Promise<unknown>): Promise<unknown> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`no answer within ${READINESS_CHECK_TIMEOUT_MS} ms`)),
      READINESS_CHECK_TIMEOUT_MS,
    );
  });
  try {
    await Promise.race([check(), timeout]);
    return null;
  } catch (error) {
    return error ?? new Error('failed');
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Runs the checks together. The answer names each dependency that is down and nothing more: driver
 * messages carry addresses, users and database names, which are nobody's business on an
 * unauthenticated route; they go to the log.
 */
export async function readiness(
  checks: Record<Dependency, () => Promise<unknown>>,
  logger: Logger,
): Promise<Readiness> {
  const names = Object.keys(checks) as Dependency[];
  const failures = await Promise.all(names.map((name) => probe(checks[name])));
  const down = names.filter((_, i) => failures[i] !== null);
  const state = (i: number) => {
    const failure = failures[i];
    return failure === null ? 'ok' : failure instanceof DependencyImpaired ? failure.state : 'unreachable';
  };
  const report = Object.fromEntries(names.map((name, i) => [name, state(i)]));
  if (down.length === 0) {
    return { ready: true, body: { status: 'ok', checks: report } };
  }
  names.forEach((dependency, i) => {
    if (failures[i] !== null) {
      const failure = failures[i];
      const err = failure instanceof DependencyImpaired ? failure.detail : failure;
      logger.warn({ dependency, err }, 'readiness check failed');
    }
  });
  const message = `not ready: ${down.map((name) => `${name} ${report[name].replace('_', ' ')}`).join('; ')}`;
  return { ready: false, body: { ...openAIError(503, message, 'service_unavailable'), checks: report } };
}
