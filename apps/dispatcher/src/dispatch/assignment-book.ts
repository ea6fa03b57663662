import { Injectable } from '@nestjs/common';
import type { DeviceSession } from '../devices/device-session';
import type { Assignment } from './assignment';
import type { Loan } from './loan';

/**
 * Which device of this dispatcher holds which task: the one map of it, an organization's task (an
 * assignment) or the dispatcher's own (a loan, see Loan). A device holds at most one task; when it lets
 * go of one, whoever listens (the assigner) finds it the next.
 */
@Injectable()
export class AssignmentBook {
  private readonly byDevice = new Map<DeviceSession, Assignment>();
  private readonly byTask = new Map<string, Assignment>();
  private readonly loans = new Map<DeviceSession, Loan>();
  /** Each device's last assignment that ended: its late events (crossing a cancel) are not misdeeds. */
  private readonly ended = new WeakMap<DeviceSession, string>();
  private onFree: (session: DeviceSession) => void = () => undefined;

  whenFree(listener: (session: DeviceSession) => void): void {
    this.onFree = listener;
  }

  add(assignment: Assignment): void {
    this.byDevice.set(assignment.session, assignment);
    this.byTask.set(assignment.taskId, assignment);
  }

  of(session: DeviceSession): Assignment | undefined {
    return this.byDevice.get(session);
  }

  forTask(taskId: string): Assignment | undefined {
    return this.byTask.get(taskId);
  }

  /** Whether `address` is the task the device held last (it ended here, the device may not know yet). */
  heldLast(session: DeviceSession, address: string): boolean {
    return this.ended.get(session) === address;
  }

  busy(session: DeviceSession): boolean {
    return this.byDevice.has(session) || this.loans.has(session);
  }

  /** The device's loan, if it is lent. */
  loanOf(session: DeviceSession): Loan | undefined {
    return this.loans.get(session);
  }

  lend(loan: Loan): void {
    this.loans.set(loan.session, loan);
  }

  /** The loan is over; the device is offered work again if it can take some. */
  endLoan(loan: Loan): void {
    loan.ended = true;
    this.ended.set(loan.session, loan.address);
    if (this.loans.get(loan.session) === loan) {
      this.loans.delete(loan.session);
    }
    this.onFree(loan.session);
  }

  allLoans(): IterableIterator<Loan> {
    return this.loans.values();
  }

  /** The device lets go of its task; it is offered work again if it can take some. */
  release(assignment: Assignment): void {
    this.ended.set(assignment.session, assignment.address);
    if (this.byDevice.get(assignment.session) === assignment) {
      this.byDevice.delete(assignment.session);
    }
    if (this.byTask.get(assignment.taskId) === assignment) {
      this.byTask.delete(assignment.taskId);
    }
    this.onFree(assignment.session);
  }

  all(): IterableIterator<Assignment> {
    return this.byDevice.values();
  }

  get size(): number {
    return this.byDevice.size;
  }
}
