import { Injectable } from '@nestjs/common';
import type { Feature } from '@app/common';
import type { DeviceSession } from '../devices/device-session';
import type { Assignment } from './assignment';
import type { Loan } from './loan';

/** The feature of a device that takes a second embedding task while one runs. */
const PREFETCH: readonly Feature[] = ['embed_prefetch'];

/**
 * Which device of this dispatcher holds which task: the one map of it, an organization's task (an
 * assignment) or the dispatcher's own (a loan, see Loan). A device holds one task, or, when it
 * announces `embed_prefetch`, two embedding tasks: its runtime gets the next batch while the agent
 * still sends the vectors of the one before (docs/architecture.md, "Embeddings"). When it lets go of
 * one, whoever listens (the assigner) finds it the next.
 */
@Injectable()
export class AssignmentBook {
  /** Each device's tasks, oldest first: one, or two embedding ones. */
  private readonly byDevice = new Map<DeviceSession, Assignment[]>();
  private count = 0;
  private readonly byTask = new Map<string, Assignment>();
  private readonly loans = new Map<DeviceSession, Loan>();
  /**
   * Each device's last assignments that ended (two: it may hold two): their late events (crossing a
   * cancel) are not misdeeds.
   */
  private readonly ended = new WeakMap<DeviceSession, string[]>();
  private onFree: (session: DeviceSession) => void = () => undefined;

  whenFree(listener: (session: DeviceSession) => void): void {
    this.onFree = listener;
  }

  add(assignment: Assignment): void {
    const held = this.byDevice.get(assignment.session);
    if (held) {
      held.push(assignment);
    } else {
      this.byDevice.set(assignment.session, [assignment]);
    }
    this.byTask.set(assignment.taskId, assignment);
    this.count++;
  }

  /** The device's task of this address, if it holds it. */
  held(session: DeviceSession, address: string): Assignment | undefined {
    return this.byDevice.get(session)?.find((a) => a.address === address);
  }

  /** Every task the device holds, oldest first. */
  heldBy(session: DeviceSession): readonly Assignment[] {
    return this.byDevice.get(session) ?? [];
  }

  /**
   * The embedding task a device may take a second one beside: it announces `embed_prefetch` and holds
   * exactly one task, an embedding one. Undefined otherwise.
   */
  prefetchBeside(session: DeviceSession): Assignment | undefined {
    const held = this.byDevice.get(session);
    if (!held || held.length !== 1 || !held[0].collector || this.loans.has(session) || !session.supports(PREFETCH)) {
      return undefined;
    }
    return held[0];
  }

  forTask(taskId: string): Assignment | undefined {
    return this.byTask.get(taskId);
  }

  /** Whether `address` is the task the device held last (it ended here, the device may not know yet). */
  heldLast(session: DeviceSession, address: string): boolean {
    return this.ended.get(session)?.includes(address) ?? false;
  }

  private endedHere(session: DeviceSession, address: string): void {
    this.ended.set(session, [address, ...(this.ended.get(session) ?? []).slice(0, 1)]);
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
    this.endedHere(loan.session, loan.address);
    if (this.loans.get(loan.session) === loan) {
      this.loans.delete(loan.session);
    }
    this.onFree(loan.session);
  }

  allLoans(): IterableIterator<Loan> {
    return this.loans.values();
  }

  /** The device lets go of a task; it is offered work again if it can take some. */
  release(assignment: Assignment): void {
    this.endedHere(assignment.session, assignment.address);
    const held = this.byDevice.get(assignment.session);
    const at = held?.indexOf(assignment) ?? -1;
    if (held && at >= 0) {
      held.splice(at, 1);
      this.count--;
      if (held.length === 0) {
        this.byDevice.delete(assignment.session);
      }
    }
    if (this.byTask.get(assignment.taskId) === assignment) {
      this.byTask.delete(assignment.taskId);
    }
    this.onFree(assignment.session);
  }

  /** Every task held, by every device. */
  *all(): IterableIterator<Assignment> {
    for (const held of this.byDevice.values()) {
      yield* held;
    }
  }

  get size(): number {
    return this.count;
  }
}
