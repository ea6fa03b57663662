import { Injectable } from '@nestjs/common';
import { DispatcherMetrics } from '../infra/dispatcher-metrics.service';
import { DeviceRegistry } from './device-registry.service';

/**
 * The devices' gauges, computed at each scrape from the registry: counted in a map first and set once
 * per label set, since each labelled inc costs prom-client a label lookup (10,000 devices: 21 ms of a
 * scrape, the dispatcher's event loop held meanwhile).
 */
@Injectable()
export class DeviceMetrics {
  constructor(metrics: DispatcherMetrics, devices: DeviceRegistry) {
    metrics.gauge(
      'switchyard_devices_online',
      'Devices connected to this dispatcher and available, by model (catalog ids only) and pool kind',
      ['model', 'pool'],
      (gauge) => {
        const counts = new Map<string, { model: string; pool: string; n: number }>();
        for (const device of devices.all()) {
          if (device.ready) {
            const pool = device.pool === 'network' ? 'network' : 'direct';
            for (const model of device.models) {
              const key = `${pool} ${model}`;
              const count = counts.get(key);
              if (count) {
                count.n++;
              } else {
                counts.set(key, { model, pool, n: 1 });
              }
            }
          }
        }
        gauge.reset();
        for (const { model, pool, n } of counts.values()) {
          gauge.set({ model, pool }, n);
        }
      },
    );
    metrics.gauge('switchyard_devices_connected', 'Devices connected to this dispatcher', [], (gauge) => {
      gauge.set(devices.size);
    });
  }
}
