import { AppError } from '../errors/app-error';
import type { PrismaClient } from '../prisma/generated/client';
import { parseTaskAddress, taskView } from '../tasks/task-address';
import { withUsageSource } from '../usage/task-usage-source';

/** Operators' view of task records: any organization's. */
export class AdminTasksService {
  constructor(private readonly db: PrismaClient) {}

  async show(address: string) {
    const parsed = parseTaskAddress(address);
    const task = parsed ? await this.db.task.findUnique({ where: { address }, include: { org: true } }) : null;
    if (!task) {
      throw new AppError('task_not_found', `task '${address}' does not exist`, 'task_address');
    }
    return { ...withUsageSource(taskView(task), task.usageSource), org: task.org.name, api_key_id: task.apiKeyId };
  }
}
