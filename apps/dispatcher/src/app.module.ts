import { Module } from '@nestjs/common';
import type { DynamicModule } from '@nestjs/common';
import { ConfigModule, PgModule } from '@app/common';
import type { AppConfig, Logger } from '@app/common';
import { CanariesModule } from './canaries/canaries.module';
import { DevicesModule } from './devices/devices.module';
import { DispatchModule } from './dispatch/dispatch.module';
import { dispatcherCore } from './infra/dispatcher-core';
import { InfraModule } from './infra/infra.module';
import { QueuesModule } from './queues/queues.module';
import { RelayModule } from './relay/relay.module';
import { TasksModule } from './tasks/tasks.module';

/**
 * The dispatcher: one module per responsibility, dependencies one way (docs/architecture.md):
 * canaries → devices, dispatch; dispatch → devices, queues, relay; tasks → queues; all of them → infra
 * and the core (libs/common).
 */
@Module({})
export class DispatcherModule {
  static forRoot(config: AppConfig, logger: Logger): DynamicModule {
    return {
      module: DispatcherModule,
      imports: [
        ConfigModule.forRoot(config),
        PgModule,
        dispatcherCore(logger),
        InfraModule,
        TasksModule,
        QueuesModule,
        RelayModule,
        DevicesModule,
        DispatchModule,
        CanariesModule,
      ],
    };
  }
}
