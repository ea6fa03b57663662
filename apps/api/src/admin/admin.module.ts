import { Module } from '@nestjs/common';
import { AdminAuditController } from './audit/audit.controller';
import { AdminCanariesController } from './canaries/canaries.controller';
import { AdminDevicesController } from './devices/devices.controller';
import { AdminFleetController } from './fleet/fleet.controller';
import { AdminKeysController } from './keys/keys.controller';
import { AdminModelsController } from './models/models.controller';
import { AdminOrgsController } from './orgs/orgs.controller';

/**
 * The admin HTTP API (`/admin/*`, ADMIN_TOKEN): one feature folder per resource (orgs, keys, models, canaries, devices, fleet, audit), each with its
 * controller (routes and their OpenAPI descriptions) and its schemas. The routes call the same
 * libs/common admin services as the CLI, so both refuse the same things. `/admin/usage` is served by
 * the usage module, beside the tenant's report.
 */
@Module({
  controllers: [
    AdminOrgsController,
    AdminKeysController,
    AdminModelsController,
    AdminCanariesController,
    AdminDevicesController,
    AdminFleetController,
    AdminAuditController,
  ],
})
export class AdminModule {}
