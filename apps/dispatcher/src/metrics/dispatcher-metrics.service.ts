import { Injectable } from '@nestjs/common';
import { Counter, Gauge } from 'prom-client';
import type { Registry } from 'prom-client';
import { createRegistry } from '@app/common';
import { DeviceRegistry } from '../devices/device-registry.service';
import { TaskQueueService } from '../queues/task-queue.service';

/** The dispatcher's metrics (docs/operations.md says what each means). */
@Injectable()
export class DispatcherMetrics {
  readonly registry: Registry = createRegistry('dispatcher');

  readonly tasks = new Counter({
    name: 'switchyard_dispatcher_tasks_total',
    help: 'Tasks this dispatcher ended, by outcome (completed, or the error code)',
    labelNames: ['outcome'],
    registers: [this.registry],
  });

  readonly assignments = new Counter({
    name: 'switchyard_assignments_total',
    help: 'Assignments to devices, by result (accepted, refused, requeued)',
    labelNames: ['result'],
    registers: [this.registry],
  });

  readonly invalidEvents = new Counter({
    name: 'switchyard_device_invalid_events_total',
    help: 'Events from devices rejected as malformed, out of order or for a task they do not hold',
    labelNames: ['reason'],
    registers: [this.registry],
  });

  constructor(devices: DeviceRegistry, queues: TaskQueueService) {
    new Gauge({
      name: 'switchyard_devices_online',
      help: 'Devices connected to this dispatcher and available, by model and pool kind',
      labelNames: ['model', 'pool'],
      registers: [this.registry],
      collect() {
        this.reset();
        for (const device of devices.all()) {
          if (device.available) {
            for (const model of device.models) {
              this.inc({ model, pool: device.pool === 'network' ? 'network' : 'direct' });
            }
          }
        }
      },
    });
    new Gauge({
      name: 'switchyard_devices_connected',
      help: 'Devices connected to this dispatcher',
      registers: [this.registry],
      collect() {
        this.set(devices.size);
      },
    });
    new Gauge({
      name: 'switchyard_queue_depth',
      help: 'Jobs waiting, by queue (model and pool) this dispatcher serves',
      labelNames: ['queue'],
      registers: [this.registry],
      async collect() {
        this.reset();
        for (const [queue, waiting] of await queues.depths()) {
          this.set({ queue }, waiting);
        }
      },
    });
  }
}
