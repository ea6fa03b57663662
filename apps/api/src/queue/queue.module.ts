import { Module } from '@nestjs/common';
import { JobQueue } from './job-queue.service';

/** The api's side of the queues: enqueue a task with its job, withdraw it, cancel it, where it stands. */
@Module({ providers: [JobQueue], exports: [JobQueue] })
export class QueueModule {}
