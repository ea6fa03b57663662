import { Module } from '@nestjs/common';
import { TaskWriters } from './task-writers.service';

/** Relay: what a device sends becomes its task's stream entries, in order, with the task's transitions. */
@Module({ providers: [TaskWriters], exports: [TaskWriters] })
export class RelayModule {}
