import { Module } from '@nestjs/common';
import { JobSource } from './job-source.service';
import { QueueWatch } from './queue-watch.service';
import { Resumer } from './resumer.service';

/** Queues: taking jobs from lines in fair-share order, putting them back, finishing them; the apis' announcements. */
@Module({ providers: [JobSource, QueueWatch, Resumer], exports: [JobSource, QueueWatch, Resumer] })
export class QueuesModule {}
