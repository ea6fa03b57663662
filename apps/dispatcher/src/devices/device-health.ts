import { Injectable } from '@nestjs/common';
import { HealthReport } from '@app/common';
import { DeviceRegistry } from './device-registry.service';

/** `GET /healthz` says how many devices this dispatcher holds. */
@Injectable()
export class DeviceHealth {
  constructor(health: HealthReport, devices: DeviceRegistry) {
    health.add('devices', () => devices.size);
  }
}
