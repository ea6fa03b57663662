import type { Continuation, TaskEvent } from '@app/common';
import type { DeviceSession } from '../devices/device-session';
import type { TaskJob } from '../queues/job-source.service';
import type { EmbedCollector } from '../relay/embed-collector';
import type { OutputTracker } from '../relay/output-tracker';
import type { TaskWriter } from '../relay/task-writer';
import type { TaskTrace } from './task-trace';

/** A task a device of this dispatcher is working on. */
export class Assignment {
  /** Known once the claim is accepted; events that come before wait in `early`. */
  attempt = 0;
  writer: TaskWriter | null = null;
  readonly early: TaskEvent[] = [];
  /** The device acknowledged the assignment. */
  accepted = false;
  ended = false;
  /** When the assignment went out (epoch ms). */
  readonly assignedAt = Date.now();
  /** Its spans, when its job carries a trace and traces are exported. */
  trace: TaskTrace | null = null;
  /** Settles when the claim does (accepted: `attempt` is set; refused: it stays 0). */
  readonly claimed: Promise<void>;
  private settleClaim!: () => void;

  constructor(
    readonly session: DeviceSession,
    readonly job: TaskJob,
    /** The BullMQ lock token: the claim on the job. */
    readonly token: string,
    readonly tracker: OutputTracker,
    /** An embedding task's vectors, as they arrive (null for a chat task). */
    readonly collector: EmbedCollector | null = null,
  ) {
    this.claimed = new Promise((resolve) => (this.settleClaim = resolve));
  }

  /** The claim was accepted (with this attempt and writer) or refused. */
  settle(claim: { attempt: number; writer: TaskWriter } | null): void {
    if (claim) {
      this.attempt = claim.attempt;
      this.writer = claim.writer;
      for (const event of this.early.splice(0)) {
        claim.writer.push(event);
      }
    }
    this.settleClaim();
  }

  get taskId(): string {
    return this.job.data.taskId;
  }

  get address(): string {
    return this.job.data.taskAddress;
  }

  /** What the client already had when this device was given the task (a resumed task), else null. */
  get continued(): Continuation | null {
    return this.job.data.kind === 'embed' ? null : (this.job.data.continued ?? null);
  }

  get line(): string {
    return this.job.queueName;
  }

  /** Whether output reached the api (the task can no longer move to another device). */
  get relayed(): boolean {
    return this.tracker.firstOutputAt !== null;
  }

  /** An output event, in order, whether or not the claim has been confirmed yet. */
  relay(event: TaskEvent): void {
    if (this.writer) {
      this.writer.push(event);
    } else {
      this.early.push(event);
    }
  }
}
