import { Controller, Get, Param } from '@nestjs/common';
import { AppError, PrismaService, TaskRepository, parseTaskAddress, taskView, withUsageSource } from '@app/common';
import { Caller } from '../auth/auth-context';
import type { AuthContext } from '../auth/auth-context';

@Controller('v1/tasks')
export class TasksController {
  constructor(
    private readonly prisma: PrismaService,
    private readonly tasks: TaskRepository,
  ) {}

  /**
   * A task record, to the organization that owns it only (404 to everyone else). While a task is in
   * flight (and a while after) its state in Redis is the newest; its Postgres row is written behind.
   */
  @Get(':address')
  async get(@Caller() caller: AuthContext, @Param('address') address: string) {
    const parsed = parseTaskAddress(address);
    const live = parsed ? await this.tasks.get(parsed.id) : null;
    if (live && live.orgId === caller.orgId && live.address === address) {
      return withUsageSource(taskView(live), live.usageSource);
    }
    const task = parsed ? await this.prisma.client.task.findFirst({ where: { address, orgId: caller.orgId } }) : null;
    if (!task) {
      throw new AppError('task_not_found', `No task '${address}' exists for your organization.`, 'task_address');
    }
    return withUsageSource(taskView(task), task.usageSource);
  }
}
