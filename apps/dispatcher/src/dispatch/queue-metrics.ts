import { Injectable } from '@nestjs/common';
import { DeviceRegistry } from '../devices/device-registry.service';
import { DispatcherMetrics } from '../infra/dispatcher-metrics.service';
import { JobSource } from '../queues/job-source.service';

/** The depth of the queues this dispatcher's devices serve, computed at each scrape. */
@Injectable()
export class QueueMetrics {
  constructor(metrics: DispatcherMetrics, devices: DeviceRegistry, jobs: JobSource) {
    metrics.gauge(
      'switchyard_queue_depth',
      'Jobs waiting, by queue (model and pool), for the queues this dispatcher serves',
      ['queue'],
      async (gauge) => {
        gauge.reset();
        const queues = new Set([...devices.all()].flatMap((d) => d.queues));
        for (const queue of queues) {
          gauge.set({ queue }, await jobs.fair.depth(queue));
        }
      },
    );
  }
}
