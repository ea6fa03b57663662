import { Module } from '@nestjs/common';
import { QueueModule } from '../queue/queue.module';
import { FlightsService } from './flights.service';
import { TaskStreamReader } from './task-stream.reader';

/** Flights: each request's task followed through its states, from its stream, with its timers. */
@Module({
  imports: [QueueModule],
  providers: [TaskStreamReader, FlightsService],
  exports: [FlightsService],
})
export class FlightModule {}
