import { Global, Module } from '@nestjs/common';
import type { DynamicModule } from '@nestjs/common';
import { LOGGER } from '@app/common';
import type { Logger } from '@app/common';
import { DispatcherMetrics } from './dispatcher-metrics.service';
import { MetricsController } from './metrics.controller';
import { RedisBatch } from './redis-batch';
import { RedisConnections, redisProviders } from './redis.providers';

/**
 * What every module of the dispatcher uses: the logger, the Redis connections (and the batch of
 * background writes on the command connection), the metrics.
 */
@Global()
@Module({})
export class InfraModule {
  static forRoot(logger: Logger): DynamicModule {
    return {
      module: InfraModule,
      controllers: [MetricsController],
      providers: [
        { provide: LOGGER, useValue: logger },
        ...redisProviders,
        RedisConnections,
        RedisBatch,
        DispatcherMetrics,
      ],
      exports: [
        LOGGER,
        ...redisProviders.map((p) => (p as { provide: symbol }).provide),
        RedisBatch,
        DispatcherMetrics,
      ],
    };
  }
}
