import type { DynamicModule } from '@nestjs/common';
import { CoreModule, LINES_REDIS, RECORDS_REDIS, REDIS, SUB_REDIS } from '@app/common';
import type { Logger } from '@app/common';
import { DispatcherMetrics } from './dispatcher-metrics.service';

/**
 * The dispatcher's core (libs/common CoreModule): what it shares with the api, with what differs
 * here. Its Redis connections are a constant four, whatever the number of devices, models or queues
 * (BullMQ's lines all share LINES_REDIS, see LineQueue).
 */
export function dispatcherCore(logger: Logger): DynamicModule {
  return CoreModule.forRoot({
    kind: 'dispatcher',
    logger,
    redis: [
      { token: REDIS, name: 'switchyard-dispatcher', use: 'commands' },
      { token: LINES_REDIS, name: 'switchyard-dispatcher-lines', use: 'commands' },
      { token: SUB_REDIS, name: 'switchyard-dispatcher-sub', use: 'subscriber' },
      { token: RECORDS_REDIS, name: 'switchyard-dispatcher-records', use: 'blocking' },
    ],
    liveness: { awaitFirstRenewal: true, onShutdown: 'withdraw' },
    metrics: DispatcherMetrics,
  });
}
