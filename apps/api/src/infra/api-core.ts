import type { DynamicModule } from '@nestjs/common';
import { CoreModule, RECORDS_REDIS, REDIS, STREAMS_REDIS, SUB_REDIS } from '@app/common';
import type { Logger } from '@app/common';
import { Public } from '../auth/access.decorator';
import { ApiRoute } from '../openapi/api-route.decorator';
import { OPERATIONS_ROUTES } from '../openapi/operations.routes';
import { MetricsService } from '../metrics/metrics.service';

/**
 * The api's core (libs/common CoreModule): what it shares with the dispatcher, with what differs
 * here. Its Redis connections are a constant four; REDIS fails a command at once while Redis is
 * unreachable (no offline queue), so that a client gets a quick 503 rather than a hanging request.
 */
export function apiCore(logger: Logger): DynamicModule {
  return CoreModule.forRoot({
    kind: 'api',
    logger,
    redis: [
      { token: REDIS, name: 'switchyard-api', use: 'commands', offlineQueue: false },
      { token: STREAMS_REDIS, name: 'switchyard-api-streams', use: 'blocking' },
      { token: RECORDS_REDIS, name: 'switchyard-api-records', use: 'blocking' },
      { token: SUB_REDIS, name: 'switchyard-api-sub', use: 'subscriber' },
    ],
    liveness: { awaitFirstRenewal: false, onShutdown: 'lapse' },
    metrics: MetricsService,
    // Health, readiness and metrics answer without credentials (the auth hook reads @Public from the
    // route), and are described in the OpenAPI document like every route.
    decorateRoute: (route) => [Public(), ApiRoute(OPERATIONS_ROUTES[route])],
  });
}
