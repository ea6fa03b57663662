import { Module } from '@nestjs/common';
import type { DynamicModule } from '@nestjs/common';
import { APP_FILTER, APP_GUARD } from '@nestjs/core';
import { PassportModule } from '@nestjs/passport';
import { ConfigModule, LOGGER, PrismaModule } from '@app/common';
import type { AppConfig, Logger } from '@app/common';
import { AdminController } from './admin/admin.controller';
import { ApiKeyService } from './auth/api-key.service';
import { AuthGuard } from './auth/auth.guard';
import { BearerStrategy } from './auth/bearer.strategy';
import { AllExceptionsFilter } from './common/all-exceptions.filter';
import { HealthController } from './health/health.controller';
import { KeyUsageService } from './keys/key-usage.service';
import { UsageController } from './usage/usage.controller';
import { OpenApiController } from './openapi/openapi.controller';
import { UsageFoldService } from './usage/usage-fold.service';
import { ChatCompletionsController } from './completions/chat-completions.controller';
import { ModelsController } from './models/models.controller';
import { OllamaController } from './ollama/ollama.controller';
import { LimitsService } from './limits/limits.service';
import { MetricsController } from './metrics/metrics.controller';
import { MetricsService } from './metrics/metrics.service';
import { PresenceService } from './relay/presence.service';
import { RelayService } from './relay/relay.service';
import { TaskQueueService } from './relay/task-queue.service';
import { TaskStreamReader } from './relay/task-stream.reader';
import { TasksController } from './tasks/tasks.controller';
import { ModelsService } from './models/models.service';
import { RedisModule } from './redis/redis.module';

@Module({})
export class AppModule {
  static forRoot(config: AppConfig, logger: Logger): DynamicModule {
    return {
      module: AppModule,
      imports: [ConfigModule.forRoot(config), PrismaModule, RedisModule, PassportModule],
      controllers: [
        MetricsController,
        HealthController,
        ModelsController,
        ChatCompletionsController,
        OllamaController,
        TasksController,
        UsageController,
        AdminController,
        OpenApiController,
      ],
      providers: [
        { provide: LOGGER, useValue: logger },
        MetricsService,
        LimitsService,
        ApiKeyService,
        KeyUsageService,
        UsageFoldService,
        BearerStrategy,
        ModelsService,
        PresenceService,
        TaskQueueService,
        TaskStreamReader,
        RelayService,
        { provide: APP_GUARD, useClass: AuthGuard },
        { provide: APP_FILTER, useClass: AllExceptionsFilter },
      ],
    };
  }
}
