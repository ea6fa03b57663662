import { Module } from '@nestjs/common';
import { DevicesModule } from '../devices/devices.module';
import { QueuesModule } from '../queues/queues.module';
import { RelayModule } from '../relay/relay.module';
import { AssignmentBook } from './assignment-book';
import { Assigner } from './assigner.service';
import { DeviceEvents } from './device-events.service';
import { DeviceLoans } from './device-loans';
import { Finalizer } from './finalizer.service';
import { QueueMetrics } from './queue-metrics';

/**
 * Dispatch: who works on what. Owns the device → assignment map, hands jobs to idle devices, turns
 * device events into task outcomes through the one Finalizer; lends idle devices for the dispatcher's
 * own tasks (DeviceLoans: the canaries). Depends on devices, queues and relay (and
 * on the core's TaskRepository); none of them depends on it, the canaries module does.
 */
@Module({
  imports: [DevicesModule, QueuesModule, RelayModule],
  providers: [AssignmentBook, Finalizer, Assigner, DeviceEvents, DeviceLoans, QueueMetrics],
  exports: [DeviceEvents, DeviceLoans],
})
export class DispatchModule {}
