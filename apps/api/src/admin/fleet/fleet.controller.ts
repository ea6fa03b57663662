import { Controller, Get, Inject, Param } from '@nestjs/common';
import { AdminFleetService, AdminTasksService, AdminTrafficService, PrismaService, REDIS, sqlOf } from '@app/common';
import type { RedisClient } from '@app/common';
import { AdminOnly } from '../../auth/access.decorator';
import { ApiRoute } from '../../openapi/api-route.decorator';
import { PARAM } from '../../openapi/components';
import { list } from '../list';
import { adminTask, queueList, traffic } from './fleet.schemas';

/** The fleet at work: its queues now, the last hour of traffic, and any task's record. */
@Controller('admin')
@AdminOnly()
export class AdminFleetController {
  private readonly fleet: AdminFleetService;
  private readonly traffic: AdminTrafficService;
  private readonly tasks: AdminTasksService;

  constructor(prisma: PrismaService, @Inject(REDIS) redis: RedisClient) {
    this.fleet = new AdminFleetService(sqlOf(prisma.pool), redis);
    this.traffic = new AdminTrafficService(sqlOf(prisma.pool));
    this.tasks = new AdminTasksService(sqlOf(prisma.pool));
  }

  /** Every queue with devices online or jobs waiting: depth, oldest wait, devices, each org's line. */
  @Get('queues')
  @ApiRoute({
    summary: 'The queues: depth, oldest wait, devices serving them, each organization’s line',
    tag: 'Admin',
    ok: { description: 'The queues', json: queueList },
  })
  async listQueues() {
    return list(await this.fleet.queues());
  }

  /** The last hour by minute: requests, TTFT and duration percentiles, errors by code; the latest failures. */
  @Get('traffic')
  @ApiRoute({
    summary: 'The last hour of traffic: requests, latency percentiles, errors by code, latest failures',
    tag: 'Admin',
    ok: { description: 'The traffic', json: traffic },
  })
  showTraffic() {
    return this.traffic.lastHour();
  }

  @Get('tasks/:address')
  @ApiRoute({
    summary: 'Any task record',
    tag: 'Admin',
    params: { address: PARAM.address },
    ok: { description: 'The task', json: adminTask },
    errors: [404],
  })
  showTask(@Param('address') address: string) {
    return this.tasks.show(address);
  }
}
