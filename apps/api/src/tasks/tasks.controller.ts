import { Controller, Get, Param } from '@nestjs/common';
import { AppError, PrismaService, parseTaskAddress, taskView, withUsageSource } from '@app/common';
import { Caller } from '../auth/auth-context';
import type { AuthContext } from '../auth/auth-context';

@Controller('v1/tasks')
export class TasksController {
  constructor(private readonly prisma: PrismaService) {}

  /** A task record, to the organization that owns it only (404 to everyone else). */
  @Get(':address')
  async get(@Caller() caller: AuthContext, @Param('address') address: string) {
    const task = parseTaskAddress(address)
      ? await this.prisma.client.task.findFirst({ where: { address, orgId: caller.orgId } })
      : null;
    if (!task) {
      throw new AppError('task_not_found', `No task '${address}' exists for your organization.`, 'task_address');
    }
    return withUsageSource(taskView(task), task.usageSource);
  }
}
