import { Module } from '@nestjs/common';
import { FlightModule } from '../flight/flight.module';
import { LimitsModule } from '../limits/limits.module';
import { ModelsModule } from '../models/models.module';
import { QueueModule } from '../queue/queue.module';
import { IntakeService } from './intake.service';
import { PresenceService } from './presence.service';

/** Intake: a validated request becomes a task (caps, model, route, limits, flight, job). */
@Module({
  imports: [FlightModule, LimitsModule, ModelsModule, QueueModule],
  providers: [PresenceService, IntakeService],
  exports: [IntakeService, PresenceService],
})
export class IntakeModule {}
