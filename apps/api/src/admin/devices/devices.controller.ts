import { Body, Controller, Delete, Get, Inject, Param, Patch, Post } from '@nestjs/common';
import { AdminDevicesService, AdminFleetService, PrismaService, REDIS, sqlOf } from '@app/common';
import type { RedisClient } from '@app/common';
import { AdminOnly } from '../../auth/access.decorator';
import { parseInput } from '../../common/validation';
import { ApiRoute } from '../../openapi/api-route.decorator';
import { list } from '../list';
import {
  createDeviceBody,
  device,
  deviceCreated,
  deviceList,
  deviceRevoked,
  updateDeviceBody,
} from './devices.schemas';

const DEVICE_ID = 'The device’s id';

/** Devices: registered (the token shown once), restricted to models, revoked; shown with their live state. */
@Controller('admin')
@AdminOnly()
export class AdminDevicesController {
  private readonly devices: AdminDevicesService;
  private readonly fleet: AdminFleetService;

  constructor(prisma: PrismaService, @Inject(REDIS) redis: RedisClient) {
    this.devices = new AdminDevicesService(sqlOf(prisma.pool));
    this.fleet = new AdminFleetService(sqlOf(prisma.pool), redis);
  }

  /** Every device, with its live state: online, heartbeat, what it serves, its current task. */
  @Get('devices')
  @ApiRoute({
    summary: 'List devices',
    tag: 'Admin',
    ok: { description: 'The devices, with their live state', json: deviceList },
  })
  async listDevices() {
    return list(await this.fleet.listDevices());
  }

  @Get('devices/:id')
  @ApiRoute({
    summary: 'One device, with its live state',
    tag: 'Admin',
    params: { id: DEVICE_ID },
    ok: { description: 'The device', json: device },
    errors: [404],
  })
  showDevice(@Param('id') id: string) {
    return this.fleet.showDevice(id);
  }

  @Post('devices')
  @ApiRoute({
    summary: 'Register a device',
    tag: 'Admin',
    body: { schema: createDeviceBody, required: true },
    ok: { description: 'Registered', json: deviceCreated },
    errors: [400, 404],
  })
  createDevice(@Body() body: unknown) {
    const input = parseInput(createDeviceBody, body ?? {});
    return this.devices.create(input.name, input.org, input.models);
  }

  /** Restricts a device to listed models, or (`"models": null`) lets it serve any it may otherwise. */
  @Patch('devices/:id')
  @ApiRoute({
    summary: 'Restrict a device to listed models, or lift the restriction',
    tag: 'Admin',
    params: { id: DEVICE_ID },
    body: { schema: updateDeviceBody, required: true },
    ok: { description: 'The device', json: device },
    errors: [400, 404],
  })
  async updateDevice(@Param('id') id: string, @Body() body: unknown) {
    await this.devices.setModels(id, parseInput(updateDeviceBody, body ?? {}).models);
    return this.fleet.showDevice(id);
  }

  @Delete('devices/:id')
  @ApiRoute({
    summary: 'Revoke a device',
    tag: 'Admin',
    params: { id: DEVICE_ID },
    ok: { description: 'Revoked', json: deviceRevoked },
    errors: [404],
  })
  revokeDevice(@Param('id') id: string) {
    return this.devices.revoke(id);
  }
}
