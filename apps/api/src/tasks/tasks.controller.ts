import { Controller, Get, Param } from '@nestjs/common';
import { AppError, PrismaService, TaskRepository, parseTaskAddress, taskView, withUsageSource } from '@app/common';
import { Caller } from '../auth/auth-context';
import type { AuthContext } from '../auth/auth-context';
import { ApiRoute } from '../openapi/api-route.decorator';
import { PARAM } from '../openapi/components';
import { JobQueue } from '../queue/job-queue.service';
import { task } from './tasks.schemas';

@Controller('v1/tasks')
export class TasksController {
  constructor(
    private readonly prisma: PrismaService,
    private readonly tasks: TaskRepository,
    private readonly queue: JobQueue,
  ) {}

  /**
   * A task record, to the organization that owns it only (404 to everyone else); while it waits, with
   * its queue position and estimated wait. While a task is in flight (and a while after) its state in Redis is the newest; its Postgres row is written behind.
   */
  @Get(':address')
  @ApiRoute({
    summary: 'A task record of your organization',
    tag: 'Tasks',
    params: { address: PARAM.address },
    ok: { description: 'The task', json: task },
    errors: [404],
  })
  async get(@Caller() caller: AuthContext, @Param('address') address: string) {
    const parsed = parseTaskAddress(address);
    const live = parsed ? await this.tasks.get(parsed.id) : null;
    if (live && live.orgId === caller.orgId && live.address === address) {
      const view = withUsageSource(taskView(live, 'organization'), live.usageSource);
      const standing = live.status === 'queued' ? await this.queue.standing(live.line, live.id) : null;
      return standing ? { ...view, queue_position: standing.position, eta_ms: standing.etaMs } : view;
    }
    const row = parsed ? await this.prisma.client.task.findFirst({ where: { address, orgId: caller.orgId } }) : null;
    if (!row) {
      throw new AppError('task_not_found', `No task '${address}' exists for your organization.`, 'task_address');
    }
    return withUsageSource(taskView(row, 'organization'), row.usageSource);
  }
}
