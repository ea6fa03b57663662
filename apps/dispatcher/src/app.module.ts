import { Module } from '@nestjs/common';
import type { DynamicModule } from '@nestjs/common';
import { ConfigModule, LOGGER, PgModule } from '@app/common';
import type { AppConfig, Logger } from '@app/common';
import { DeviceGateway } from './devices/device.gateway';
import { DeviceRegistry } from './devices/device-registry.service';
import { PresenceService } from './devices/presence.service';
import { HealthController } from './health/health.controller';
import { DispatcherMetrics } from './metrics/dispatcher-metrics.service';
import { MetricsController } from './metrics/metrics.controller';
import { TaskQueueService } from './queues/task-queue.service';
import { RedisConnections, redisProviders } from './redis.providers';
import { DispatchService } from './relay/dispatch.service';
import { TaskStreamService } from './relay/task-stream.service';
import { TaskRecordsService } from './tasks/task-records.service';

@Module({})
export class DispatcherModule {
  static forRoot(config: AppConfig, logger: Logger): DynamicModule {
    return {
      module: DispatcherModule,
      imports: [ConfigModule.forRoot(config), PgModule],
      controllers: [HealthController, MetricsController],
      providers: [
        { provide: LOGGER, useValue: logger },
        ...redisProviders,
        RedisConnections,
        DeviceRegistry,
        DispatcherMetrics,
        PresenceService,
        TaskQueueService,
        TaskRecordsService,
        TaskStreamService,
        DispatchService,
        DeviceGateway,
      ],
    };
  }
}
