import { z } from 'zod';
import type { CoreRoute } from '@app/common';
import type { RouteDescription } from './api-route.decorator';
import { named } from './components';
import { errorBody } from './error-bodies';

const health = named('Health', 'The process is up.', z.strictObject({ status: z.literal('ok') }));
const check = z.enum(['ok', 'unreachable', 'refuses_writes']);
const checks = z.strictObject({ postgres: check, redis: check });
const ready = named('Ready', 'Postgres and Redis answer.', z.strictObject({ status: z.literal('ok'), checks }));
const notReady = named(
  'NotReady',
  'A dependency does not answer, or (Redis) refuses writes: the error names it (and nothing else about it); `checks` says `ok`, `unreachable` or `refuses_writes` for each.',
  z.strictObject({ error: errorBody.shape.error, checks }),
);

/**
 * The descriptions of the core module's routes (health, readiness, metrics: libs/common/src/core),
 * which the api puts on them as it mounts the core (infra/api-core.ts).
 */
export const OPERATIONS_ROUTES: Record<CoreRoute, RouteDescription> = {
  healthz: {
    summary: 'Liveness',
    tag: 'Operations',
    ok: { description: 'Up', json: health },
  },
  readyz: {
    summary: 'Readiness: Postgres and Redis answer',
    tag: 'Operations',
    ok: { description: 'Ready', json: ready },
    errors: [503],
    errorBodies: { 503: notReady },
  },
  metrics: {
    summary: 'Prometheus metrics',
    tag: 'Operations',
    ok: { description: 'Prometheus text format', other: { 'text/plain': 'Prometheus exposition format 0.0.4' } },
  },
};
