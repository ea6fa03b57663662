import { Module } from '@nestjs/common';
import { TasksModule } from '../tasks/tasks.module';
import { TaskWriters } from './task-writers.service';

/** Relay: what a device sends becomes its task's stream entries, in order, with the task's transitions. */
@Module({ imports: [TasksModule], providers: [TaskWriters], exports: [TaskWriters] })
export class RelayModule {}
