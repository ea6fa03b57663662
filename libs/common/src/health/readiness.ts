import { openAIError } from '../errors/app-error';
import type { Logger } from '../logging/logger';

/** Readiness must answer quickly even when a dependency hangs. */
export const READINESS_CHECK_TIMEOUT_MS = 1_500;

/** The dependencies /readyz checks, by the names it reports. */
export type Dependency = 'postgres' | 'redis';

export interface Readiness {
  ready: boolean;
  /** `{"status":"ok","checks":…}`, or the OpenAI error shape with the same `checks`. */
  body: Record<string, unknown>;
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
  const report = Object.fromEntries(names.map((name) => [name, down.includes(name) ? 'unreachable' : 'ok']));
  if (down.length === 0) {
    return { ready: true, body: { status: 'ok', checks: report } };
  }
  names.forEach((dependency, i) => {
    if (failures[i] !== null) {
      logger.warn({ dependency, err: failures[i] }, 'readiness check failed');
    }
  });
  const message = `not ready: ${down.map((name) => `${name} unreachable`).join('; ')}`;
  return { ready: false, body: { ...openAIError(503, message, 'service_unavailable'), checks: report } };
}
