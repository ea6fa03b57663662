import { Global, Module } from '@nestjs/common';
import type { DynamicModule } from '@nestjs/common';
import { LOGGER } from '@app/common';
import type { Logger } from '@app/common';
import { InstanceService } from './instance.service';
import { RecordWriterHost } from './record-writer.host';
import { RedisModule } from './redis.module';

/** What every module of the api uses: the logger, Redis, the task repository, this instance's identity. */
@Global()
@Module({})
export class InfraModule {
  static forRoot(logger: Logger): DynamicModule {
    return {
      module: InfraModule,
      imports: [RedisModule],
      providers: [{ provide: LOGGER, useValue: logger }, InstanceService, RecordWriterHost],
      exports: [LOGGER, InstanceService],
    };
  }
}
