import { Injectable } from '@nestjs/common';
import type { DeviceSession } from '../devices/device-session';
import type { OutputTracker } from '../relay/output-tracker';
import { AssignmentBook } from './assignment-book';
import { Assigner } from './assigner.service';
import type { Loan, LoanListener } from './loan';

/**
 * What the dispatch module offers a module that gives devices tasks of the dispatcher's own (the
 * canaries): borrowing an idle device, and giving it back. The device's events about the task reach
 * the borrower's listener (DeviceEvents), which hears of the loan's end there too.
 */
@Injectable()
export class DeviceLoans {
  constructor(
    private readonly assigner: Assigner,
    private readonly book: AssignmentBook,
  ) {}

  /** The device, lent for the task at `address`; null when it is busy, or an organization's job waits for it. */
  lend(session: DeviceSession, address: string, tracker: OutputTracker, listener: LoanListener): Promise<Loan | null> {
    return this.assigner.lend(session, address, tracker, listener);
  }

  /** Whether the device is free here, with no job marked waiting for it: worth choosing a task for (lend checks again). */
  free(session: DeviceSession): boolean {
    return this.assigner.lendable(session);
  }

  /** The borrower ends the loan itself (no answer in time): the device is told to stop, and is free again. */
  giveBack(loan: Loan): void {
    if (loan.ended) {
      return;
    }
    loan.session.send('task:cancel', { task_address: loan.address });
    this.book.endLoan(loan);
  }
}
