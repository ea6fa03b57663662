import type { FleetCommand, FleetReport } from '../fleet-worker';
import type { Proc } from './stack';
import { sleep, startNode } from './stack';

/** The bench's side of a fleet-worker process: many devices in one process, driven over IPC. */
export class Fleet {
  private readonly waiting = new Map<string, (report: FleetReport) => void>();
  onProgress?: (report: Extract<FleetReport, { type: 'progress' }>) => void;

  constructor(readonly proc: Proc) {
    proc.child.on('message', (report: FleetReport) => {
      if (report.type === 'error') {
        process.stderr.write(`${proc.name}: ${report.message}\n`);
        return;
      }
      if (report.type === 'progress') {
        this.onProgress?.(report);
        return;
      }
      const resolve = this.waiting.get(report.type);
      this.waiting.delete(report.type);
      resolve?.(report);
    });
  }

  static spawn(name: string): Fleet {
    // The agents log at warn, as the bench's api and dispatcher do.
    return new Fleet(
      startNode(
        name,
        'bench/fleet-worker.js',
        [],
        { PATH: process.env.PATH },
        { stdio: ['ignore', 'pipe', 'pipe', 'ipc'] },
      ),
    );
  }

  send(command: FleetCommand): void {
    this.proc.child.send(command);
  }

  /** The next report of a type (only one waiter per type). */
  next<T extends FleetReport['type']>(type: T, timeoutMs = 180_000): Promise<Extract<FleetReport, { type: T }>> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(type);
        reject(new Error(`${this.proc.name}: no ${type} report within ${timeoutMs} ms\n${this.proc.output}`));
      }, timeoutMs);
      this.waiting.set(type, (report) => {
        clearTimeout(timer);
        resolve(report as Extract<FleetReport, { type: T }>);
      });
    });
  }

  async collectAssigns(): Promise<[string, number][]> {
    const reply = this.next('assigns', 30_000);
    this.send({ type: 'collect' });
    return (await reply).items;
  }

  async stop(): Promise<void> {
    if (this.proc.running) {
      try {
        this.send({ type: 'stop' });
      } catch {
        // the channel is already closed
      }
      await Promise.race([this.proc.exited, sleep(3_000)]);
    }
    await this.proc.stop(5_000);
  }
}
