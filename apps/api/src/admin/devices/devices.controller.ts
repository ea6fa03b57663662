import { Body, Controller, Delete, Get, Inject, Param, Patch, Post } from '@nestjs/common';
import { AdminDevicesService, AdminFleetService, AppError, LOGGER, PrismaService, REDIS, sqlOf } from '@app/common';
import type { AuditActor, Logger, RedisClient } from '@app/common';
import { AdminOnly } from '../../auth/access.decorator';
import { AdminActor } from '../../auth/admin-actor';
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

  constructor(
    prisma: PrismaService,
    @Inject(REDIS) redis: RedisClient,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {
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
  createDevice(@Body() body: unknown, @AdminActor() actor: AuditActor) {
    const input = parseInput(createDeviceBody, body ?? {});
    return this.devices.as(actor).create(input.name, input.org, input.models);
  }

  /**
   * Restricts a device to listed models, or (`"models": null`) lets it serve any it may otherwise;
   * quarantines a network device, or trusts it again. Either or both.
   */
  @Patch('devices/:id')
  @ApiRoute({
    summary:
      'Restrict a device to listed models, or lift the restriction; quarantine a network device, or trust it again',
    tag: 'Admin',
    params: { id: DEVICE_ID },
    body: { schema: updateDeviceBody, required: true },
    ok: { description: 'The device', json: device },
    errors: [400, 404],
  })
  async updateDevice(@Param('id') id: string, @Body() body: unknown, @AdminActor() actor: AuditActor) {
    const devices = this.devices.as(actor);
    const input = parseInput(updateDeviceBody, body ?? {});
    if (input.reason !== undefined && input.trust === undefined) {
      throw new AppError('invalid_request', 'a reason goes with a change of trust', 'reason');
    }
    if (input.models === undefined && input.trust === undefined) {
      throw new AppError('invalid_request', 'give models, trust or both', 'models');
    }
    // Both checked before either is made: a bad half changes nothing.
    const trust = input.trust === undefined ? null : await devices.checkTrust(id, input.trust, input.reason);
    if (input.models !== undefined) {
      await devices.setModels(id, input.models);
    }
    if (trust) {
      const { device, from } = await devices.applyTrust(trust);
      this.logger.warn(
        { deviceId: id, from, to: device.trust.state, reason: device.trust.reason },
        'device trust changed by an admin',
      );
    }
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
  revokeDevice(@Param('id') id: string, @AdminActor() actor: AuditActor) {
    return this.devices.as(actor).revoke(id);
  }
}
