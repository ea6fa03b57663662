import { Global, Module } from '@nestjs/common';
import type { DynamicModule } from '@nestjs/common';
import { LOGGER } from '../logging/logger';
import { TaskRepository } from '../tasks/task-repository';
import { CORE_OPTIONS } from './core-options';
import type { CoreOptions } from './core-options';
import { HealthReport } from './health-report';
import { healthController } from './health.controller';
import { InstanceService } from './instance.service';
import { METRICS_SOURCE, metricsController } from './metrics.controller';
import { RecordWriterHost } from './record-writer.host';
import { RECORDS_REDIS, REDIS, redisConnectionProviders } from './redis-connections';
import { taskRepositoryProvider } from './task-repository.provider';

/**
 * What the api and the dispatcher both run, once: the logger, the process's Redis connections (closed
 * last), the TaskRepository, this instance's identity and liveness, the writer of task records,
 * `/healthz`, `/readyz` and `/metrics`. Global, so that every module of the process injects them.
 * Expects the configuration (ConfigModule) and Postgres (PgService, from PgModule or PrismaModule).
 */
@Global()
@Module({})
export class CoreModule {
  static forRoot(options: CoreOptions): DynamicModule {
    for (const required of [REDIS, RECORDS_REDIS]) {
      if (!options.redis.some((spec) => spec.token === required)) {
        throw new Error(`CoreModule: the ${options.kind}'s Redis connections must include ${required.description}`);
      }
    }
    const decorate = options.decorateRoute ?? (() => []);
    const connections = redisConnectionProviders(options.redis);
    return {
      module: CoreModule,
      controllers: [healthController(decorate), metricsController(decorate)],
      providers: [
        { provide: CORE_OPTIONS, useValue: options },
        { provide: LOGGER, useValue: options.logger },
        ...connections,
        taskRepositoryProvider,
        InstanceService,
        RecordWriterHost,
        HealthReport,
        options.metrics,
        { provide: METRICS_SOURCE, useExisting: options.metrics },
      ],
      exports: [
        LOGGER,
        ...options.redis.map((spec) => spec.token),
        TaskRepository,
        InstanceService,
        HealthReport,
        options.metrics,
      ],
    };
  }
}
