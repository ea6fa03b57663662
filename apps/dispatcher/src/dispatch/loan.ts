import type { DeltaPayload, DonePayload, TaskErrorPayload } from '@app/common';
import type { DeviceSession } from '../devices/device-session';
import type { OutputTracker } from '../relay/output-tracker';

/** Why a loan ended without the device's own ending. */
export type LoanLoss = 'device_disconnected' | 'dispatcher_shutdown' | 'invalid_event' | 'output_exceeded';

/** What the borrower of a device hears of the task it gave it: the device's events, in order, or their loss. */
export interface LoanListener {
  delta(payload: DeltaPayload): void;
  done(payload: DonePayload): void;
  error(payload: TaskErrorPayload): void;
  lost(reason: LoanLoss): void;
}

/**
 * A device of this dispatcher lent for a task of the dispatcher's own (a canary): no job, no claim,
 * no task record. While lent the device is busy to the assigner, and its events about the task go to
 * the borrower, in sequence and within the request's bounds, as an assignment's do.
 */
export class Loan {
  ended = false;

  constructor(
    readonly session: DeviceSession,
    readonly address: string,
    readonly tracker: OutputTracker,
    readonly listener: LoanListener,
  ) {}
}
