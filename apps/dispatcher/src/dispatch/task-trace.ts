import { SpanKind, endFailed, startSpan, traceparentOf } from '@app/common';
import type { JobData, Span } from '@app/common';

/**
 * The dispatcher's spans of one assignment, children of the api's request span (the job's
 * `traceparent`), when traces are exported (docs/operations.md, "Traces"):
 *
 * - `queue wait`: from the job's enqueueing to the moment this dispatcher took it for a device;
 * - `assignment`: from then to the device's acknowledgement;
 * - `device run`: from the assignment to its ending (with the outcome); the agent's `runtime call` is
 *   its child, through `task:assign`'s `traceparent`;
 * - `first token`: from the assignment to the first output the device sent, if any.
 *
 * Null (nothing made) for a job without a trace, or while tracing is off.
 */
export class TaskTrace {
  private acknowledged = false;

  private constructor(
    private readonly assigning: Span,
    private readonly run: Span,
    private readonly assignedAt: number,
  ) {}

  static start(
    data: JobData,
    enqueuedAt: number,
    takenAt: number,
    deviceId: string,
    attempt: number,
  ): TaskTrace | null {
    if (!data.traceparent) {
      return null;
    }
    const attributes = {
      'switchyard.task_address': data.taskAddress,
      'switchyard.model': data.model,
      'switchyard.device_id': deviceId,
      'switchyard.attempt': attempt,
    };
    const wait = startSpan('queue wait', data.traceparent, { startTime: enqueuedAt, attributes });
    if (!wait) {
      return null;
    }
    wait.end(takenAt);
    const assigning = startSpan('assignment', data.traceparent, { startTime: takenAt, attributes })!;
    const now = Date.now();
    const run = startSpan('device run', data.traceparent, { kind: SpanKind.PRODUCER, startTime: now, attributes })!;
    return new TaskTrace(assigning, run, now);
  }

  /** What `task:assign` carries: the device run's context. */
  get traceparent(): string | undefined {
    return traceparentOf(this.run);
  }

  /** The device took the assignment (or refused it: `refusal`). */
  answered(refusal?: string): void {
    if (this.acknowledged) {
      return;
    }
    this.acknowledged = true;
    if (refusal) {
      endFailed(this.assigning, refusal);
    } else {
      this.assigning.end();
    }
  }

  /** The assignment ended: `outcome` is `completed` or the code or kind it ended with. */
  end(outcome: string, firstOutputAt: number | null): void {
    this.answered();
    if (firstOutputAt !== null) {
      startSpan('first token', this.traceparent, { startTime: this.assignedAt })?.end(firstOutputAt);
    }
    this.run.setAttribute('switchyard.outcome', outcome);
    if (outcome === 'completed') {
      this.run.end();
    } else {
      endFailed(this.run, outcome);
    }
  }
}
