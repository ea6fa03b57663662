import { Body, Controller, Delete, Get, HttpCode, Inject, Param, Patch, Post, Put } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { AdminFleetService, AdminService, AdminTrafficService, PrismaService, sqlOf } from '@app/common';
import { REDIS } from '../infra/redis.module';
import { AdminOnly } from '../auth/access.decorator';
import { parseInput } from '../common/validation';
import {
  addModelBody,
  createDeviceBody,
  createKeyBody,
  createOrgBody,
  limitsBody,
  rotateKeyBody,
  updateDeviceBody,
  updateModelBody,
} from './admin.schemas';

const list = <T>(data: T[]) => ({ object: 'list' as const, data });

/**
 * The admin HTTP API: the same operations as the CLI, through the same resource services of {@link AdminService}.
 * Organizations are addressed by name; a model id's `/` is sent as %2F.
 */
@Controller('admin')
@AdminOnly()
export class AdminController {
  private readonly admin: AdminService;
  private readonly fleet: AdminFleetService;
  private readonly traffic: AdminTrafficService;

  constructor(prisma: PrismaService, @Inject(REDIS) redis: Redis) {
    this.admin = new AdminService(prisma.pool);
    this.fleet = new AdminFleetService(sqlOf(prisma.pool), redis);
    this.traffic = new AdminTrafficService(sqlOf(prisma.pool));
  }

  @Get('orgs')
  async listOrgs() {
    return list(await this.admin.orgs.list());
  }

  @Post('orgs')
  createOrg(@Body() body: unknown) {
    return this.admin.orgs.create(parseInput(createOrgBody, body ?? {}).name);
  }

  /** Sets limits (a number, or null to remove one), the network switch and the weight; fields left out keep their value. */
  @Patch('orgs/:org')
  setLimits(@Param('org') org: string, @Body() body: unknown) {
    const input = parseInput(limitsBody, body ?? {});
    return this.admin.orgs.setLimits(org, {
      rpm: input.rpm,
      concurrency: input.concurrency,
      maxQueued: input.max_queued,
      network: input.network,
      weight: input.weight,
    });
  }

  @Get('orgs/:org/keys')
  async listKeys(@Param('org') org: string) {
    return list(await this.admin.keys.list(org));
  }

  @Post('orgs/:org/keys')
  createKey(@Param('org') org: string, @Body() body: unknown) {
    const input = parseInput(createKeyBody, body ?? {});
    return this.admin.keys.create({ org, label: input.label, expiresIn: input.expires_in });
  }

  @Delete('keys/:id')
  revokeKey(@Param('id') id: string) {
    return this.admin.keys.revoke(id);
  }

  /** A new key for the same org and label; the old one keeps working for the grace (default 24h). */
  @Post('keys/:id/rotate')
  rotateKey(@Param('id') id: string, @Body() body: unknown) {
    return this.admin.keys.rotate(id, parseInput(rotateKeyBody, body ?? {}));
  }

  @Get('models')
  async listModels() {
    return list(await this.admin.models.list());
  }

  @Post('models')
  addModel(@Body() body: unknown) {
    const input = parseInput(addModelBody, body ?? {});
    return this.admin.models.add({
      id: input.id,
      maxOutputTokens: input.max_output_tokens,
      ownedBy: input.owned_by,
      network: input.network,
    });
  }

  /** Changes a catalog model; fields left out keep their value. */
  @Patch('models/:model')
  updateModel(@Param('model') model: string, @Body() body: unknown) {
    const input = parseInput(updateModelBody, body ?? {});
    return this.admin.models.update(model, {
      maxOutputTokens: input.max_output_tokens,
      ownedBy: input.owned_by,
      network: input.network,
    });
  }

  @Put('orgs/:org/models/:model')
  @HttpCode(200)
  enableModel(@Param('org') org: string, @Param('model') model: string) {
    return this.admin.models.enable(model, org);
  }

  @Delete('orgs/:org/models/:model')
  disableModel(@Param('org') org: string, @Param('model') model: string) {
    return this.admin.models.disable(model, org);
  }

  /** Every device, with its live state: online, heartbeat, what it serves, its current task. */
  @Get('devices')
  async listDevices() {
    return list(await this.fleet.listDevices());
  }

  @Get('devices/:id')
  showDevice(@Param('id') id: string) {
    return this.fleet.showDevice(id);
  }

  /** Every queue with devices online or jobs waiting: depth, oldest wait, devices, each org's line. */
  @Get('queues')
  async listQueues() {
    return list(await this.fleet.queues());
  }

  @Post('devices')
  createDevice(@Body() body: unknown) {
    const input = parseInput(createDeviceBody, body ?? {});
    return this.admin.devices.create(input.name, input.org, input.models);
  }

  /** Restricts a device to listed models, or (`"models": null`) lets it serve any it may otherwise. */
  @Patch('devices/:id')
  async updateDevice(@Param('id') id: string, @Body() body: unknown) {
    await this.admin.devices.setModels(id, parseInput(updateDeviceBody, body ?? {}).models);
    return this.fleet.showDevice(id);
  }

  @Delete('devices/:id')
  revokeDevice(@Param('id') id: string) {
    return this.admin.devices.revoke(id);
  }

  /** The last hour by minute: requests, TTFT and duration percentiles, errors by code; the latest failures. */
  @Get('traffic')
  showTraffic() {
    return this.traffic.lastHour();
  }

  @Get('tasks/:address')
  showTask(@Param('address') address: string) {
    return this.admin.tasks.show(address);
  }
}
