import type { Command } from 'commander';
import { adminCall } from '../runner';
import type { Run } from '../runner';

/** `task show`: task records. */
export function addTaskCommands(program: Command, run: Run): void {
  const admin = adminCall(run);
  const task = program.command('task').description('task records');
  task
    .command('show <task-address>')
    .description('show a task record')
    .action((address: string) => admin((a) => a.tasks.show(address)));
}
