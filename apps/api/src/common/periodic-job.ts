/** Waits for `promise`, or `ms`, whichever comes first. */
export async function untilOrAfter(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([promise, new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))]);
  clearTimeout(timer);
}

export interface PeriodicSchedule {
  /** Run every this many ms, from start. */
  everyMs: number;
  /** Run once this many ms after start too (sooner than the first interval). */
  firstAfterMs?: number;
  /** The longest stop waits for the run in progress (none: as long as it takes). */
  stopWaitMs?: number;
}

/**
 * A job an api instance runs in the background (the usage fold, retention, the budgets' reconciler,
 * the keys' last use): every `everyMs`, one run at a time. A run asked for while another is in progress
 * follows it, whatever asked for it (the timer, or a caller with work of its own on the same line). Its
 * timers never keep the process alive. Each run handles its own errors: one that escapes is dropped
 * here, so that the runs after it still run.
 */
export class PeriodicJob {
  private readonly timers: NodeJS.Timeout[] = [];
  private running: Promise<void> = Promise.resolve();
  private stopped = false;

  constructor(
    private readonly work: () => Promise<void>,
    private readonly schedule: PeriodicSchedule,
  ) {}

  start(): void {
    const { everyMs, firstAfterMs } = this.schedule;
    if (firstAfterMs !== undefined) {
      this.timers.push(setTimeout(() => void this.run(), firstAfterMs).unref());
    }
    this.timers.push(setInterval(() => void this.run(), everyMs).unref());
  }

  /** Whether stop was called: a long run checks it between its steps. */
  get stopping(): boolean {
    return this.stopped;
  }

  /** Runs `work` (the job's own, by default) after the run in progress; resolves once it has run. */
  run(work: () => Promise<void> = this.work): Promise<void> {
    this.running = this.running.then(work).catch(() => undefined);
    return this.running;
  }

  /**
   * No more runs; waits for the run in progress (at most `stopWaitMs`). `lastRun`: the job's own work
   * once more after it, within the same wait (what is pending is written on the way out).
   */
  async stop(options: { lastRun?: boolean } = {}): Promise<void> {
    this.stopped = true;
    for (const timer of this.timers) {
      clearTimeout(timer);
    }
    const done = options.lastRun ? this.run() : this.running;
    const { stopWaitMs } = this.schedule;
    await (stopWaitMs === undefined ? done : untilOrAfter(done, stopWaitMs));
  }
}
