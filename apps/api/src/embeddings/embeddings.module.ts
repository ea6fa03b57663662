import { Module } from '@nestjs/common';
import { FlightModule } from '../flight/flight.module';
import { IntakeModule } from '../intake/intake.module';
import { LimitsModule } from '../limits/limits.module';
import { ModelsModule } from '../models/models.module';
import { EmbeddingsController, EmbeddingsHandler } from './embeddings.controller';
import { EmbeddingsService } from './embeddings.service';

/**
 * Embeddings: a request's inputs become batches on devices (EmbeddingsService, over intake, flights,
 * limits and models), served at OpenAI's route here. Ollama's routes (the ollama folder) use the
 * exported handler, so that the arrow runs from ollama to embeddings and not back.
 */
@Module({
  imports: [FlightModule, IntakeModule, LimitsModule, ModelsModule],
  controllers: [EmbeddingsController],
  providers: [EmbeddingsService, EmbeddingsHandler],
  exports: [EmbeddingsHandler],
})
export class EmbeddingsModule {}
