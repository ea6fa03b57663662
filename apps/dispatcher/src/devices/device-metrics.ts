import { Injectable } from '@nestjs/common';
import { DispatcherMetrics } from '../infra/dispatcher-metrics.service';
import { DeviceRegistry } from './device-registry.service';

/** The devices' gauges, computed at each scrape from the registry. */
@Injectable()
export class DeviceMetrics {
  constructor(metrics: DispatcherMetrics, devices: DeviceRegistry) {
    metrics.gauge(
      'switchyard_devices_online',
      'Devices connected to this dispatcher and available, by model (catalog ids only) and pool kind',
      ['model', 'pool'],
      (gauge) => {
        gauge.reset();
        for (const device of devices.all()) {
          if (device.ready) {
            for (const model of device.models) {
              gauge.inc({ model, pool: device.pool === 'network' ? 'network' : 'direct' });
            }
          }
        }
      },
    );
    metrics.gauge('switchyard_devices_connected', 'Devices connected to this dispatcher', [], (gauge) => {
      gauge.set(devices.size);
    });
  }
}
