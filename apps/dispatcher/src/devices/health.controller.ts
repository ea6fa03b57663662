import { Controller, Get } from '@nestjs/common';
import { DeviceRegistry } from '../devices/device-registry.service';

@Controller()
export class HealthController {
  constructor(private readonly registry: DeviceRegistry) {}

  /** The process is up; how many devices it holds. */
  @Get('healthz')
  health() {
    return { status: 'ok', devices: this.registry.size };
  }
}
