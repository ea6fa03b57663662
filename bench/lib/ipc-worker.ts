import type { Proc } from './stack';

/** What every worker may report: an error, which the bench prints and keeps. */
type ErrorReport = { type: 'error'; message: string };

/**
 * The bench's side of a worker process driven over IPC (the fleet of devices, the flooding device):
 * commands out, typed reports back, and the next report of a type awaited (one waiter per type).
 * A report nobody waits for goes to `unclaimed`.
 */
export class IpcWorker<C, R extends { type: string }> {
  private readonly waiting = new Map<string, (report: R) => void>();
  /** The errors the worker reported, in order. */
  readonly errors: string[] = [];

  constructor(
    readonly proc: Proc,
    unclaimed: (report: R) => void = () => undefined,
  ) {
    proc.child.on('message', (report: R | ErrorReport) => {
      if (report.type === 'error') {
        const message = (report as ErrorReport).message;
        this.errors.push(message);
        process.stderr.write(`${proc.name}: ${message}\n`);
        return;
      }
      const resolve = this.waiting.get(report.type);
      if (resolve) {
        this.waiting.delete(report.type);
        resolve(report as R);
      } else {
        unclaimed(report as R);
      }
    });
  }

  send(command: C): void {
    this.proc.child.send(command as object);
  }

  /** The next report of a type. */
  next<T extends R['type']>(type: T, timeoutMs = 30_000): Promise<Extract<R, { type: T }>> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(type);
        reject(new Error(`${this.proc.name}: no ${type} report within ${timeoutMs} ms\n${this.proc.output}`));
      }, timeoutMs);
      this.waiting.set(type, (report) => {
        clearTimeout(timer);
        resolve(report as Extract<R, { type: T }>);
      });
    });
  }
}
