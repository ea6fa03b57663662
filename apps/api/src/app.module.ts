import { Module } from '@nestjs/common';
import type { DynamicModule } from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { ConfigModule, PrismaModule } from '@app/common';
import type { AppConfig, Logger } from '@app/common';
import { AdminModule } from './admin/admin.module';
import { AuthModule } from './auth/auth.module';
import { DashboardController } from './dashboard/dashboard.controller';
import { AllExceptionsFilter } from './common/all-exceptions.filter';
import { LimitsModule } from './limits/limits.module';
import { RetentionService } from './usage/retention.service';
import { UsageController } from './usage/usage.controller';
import { OpenApiController } from './openapi/openapi.controller';
import { UsageFoldService } from './usage/usage-fold.service';
import { ChatCompletionsController, ChatCompletionsHandler } from './completions/chat-completions.controller';
import { OpenGpuController } from './opengpu/opengpu.controller';
import { EmbeddingsModule } from './embeddings/embeddings.module';
import { apiCore } from './infra/api-core';
import { IntakeModule } from './intake/intake.module';
import { FlightModule } from './flight/flight.module';
import { ModelsModule } from './models/models.module';
import { OllamaChatHandler } from './ollama/ollama-chat.handler';
import { OllamaEmbedHandler } from './ollama/ollama-embed.handler';
import { OllamaController } from './ollama/ollama.controller';
import { QueueModule } from './queue/queue.module';
import { TasksController } from './tasks/tasks.controller';

/**
 * The api: one module per responsibility (docs/architecture.md). The chat controllers are thin: they
 * validate the request, hand it to intake, and write the flight's events with the responder.
 */
@Module({})
export class AppModule {
  static forRoot(config: AppConfig, logger: Logger): DynamicModule {
    return {
      module: AppModule,
      imports: [
        ConfigModule.forRoot(config),
        PrismaModule,
        apiCore(logger),
        AuthModule,
        ModelsModule,
        FlightModule,
        IntakeModule,
        LimitsModule,
        EmbeddingsModule,
        QueueModule,
        AdminModule,
      ],
      controllers: [
        ChatCompletionsController,
        OllamaController,
        OpenGpuController,
        TasksController,
        UsageController,
        DashboardController,
        OpenApiController,
      ],
      providers: [
        ChatCompletionsHandler,
        OllamaChatHandler,
        // Here rather than in EmbeddingsModule, as the chat handlers are: ollama/ imports embeddings/, not back.
        OllamaEmbedHandler,
        UsageFoldService,
        RetentionService,
        { provide: APP_FILTER, useClass: AllExceptionsFilter },
      ],
    };
  }
}
