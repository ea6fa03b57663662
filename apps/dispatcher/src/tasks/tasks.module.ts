import { Module } from '@nestjs/common';
import { QueuesModule } from '../queues/queues.module';
import { ReaperService } from './reaper.service';
import { TakeoverService } from './takeover.service';

/**
 * The safety nets of tasks: the tasks of dead dispatchers taken over, tasks nobody can end any more
 * reaped. The TaskRepository and the writer of task records are the core module's (libs/common).
 */
@Module({
  imports: [QueuesModule],
  providers: [ReaperService, TakeoverService],
})
export class TasksModule {}
