import type { DeltaPayload, DonePayload, TaskErrorPayload } from '@app/common';
import type { LoanListener, LoanLoss } from '../dispatch/loan';

/** How a canary ended: with an answer (choice 0's text), or with none. */
export type CanaryOutcome = { kind: 'answered'; text: string } | { kind: 'no_answer'; why: string };

/**
 * One canary on its device: the text of its answer as the device streams it, and how it ends. Like a
 * task, it ends when the device says nothing for `idleMs` (then `onSilence` gives the device back).
 */
export class CanaryRun implements LoanListener {
  readonly outcome: Promise<CanaryOutcome>;
  private resolve!: (outcome: CanaryOutcome) => void;
  private text = '';
  private ended = false;
  private timer: NodeJS.Timeout | null = null;
  private silence: () => void = () => undefined;

  constructor(private readonly idleMs: number) {
    this.outcome = new Promise((resolve) => (this.resolve = resolve));
  }

  /** Starts the silence timer; `giveBack` runs when it fires. */
  onSilence(giveBack: () => void): void {
    this.silence = giveBack;
    this.arm();
  }

  private arm(): void {
    if (this.timer) {
      clearTimeout(this.timer);
    }
    this.timer = setTimeout(() => {
      this.silence();
      this.end({ kind: 'no_answer', why: 'timeout' });
    }, this.idleMs);
    this.timer.unref();
  }

  end(outcome: CanaryOutcome): void {
    if (this.ended) {
      return;
    }
    this.ended = true;
    if (this.timer) {
      clearTimeout(this.timer);
    }
    this.resolve(outcome);
  }

  delta(payload: DeltaPayload): void {
    for (const choice of payload.choices) {
      if (choice.index === 0 && choice.content) {
        this.text += choice.content;
      }
    }
    if (!this.ended) {
      this.arm();
    }
  }

  done(_payload: DonePayload): void {
    this.end({ kind: 'answered', text: this.text });
  }

  error(payload: TaskErrorPayload): void {
    this.end({ kind: 'no_answer', why: payload.code });
  }

  lost(reason: LoanLoss): void {
    this.end({ kind: 'no_answer', why: reason });
  }
}
