import { readFileSync } from 'node:fs';
import type { FleetCommand, FleetReport } from '../fleet-worker';
import { IpcWorker } from './ipc-worker';
import type { Proc } from './stack';
import { sleep, startNode } from './stack';

/** The bench's side of a fleet-worker process: many devices in one process, driven over IPC. */
export class Fleet extends IpcWorker<FleetCommand, FleetReport> {
  onProgress?: (report: Extract<FleetReport, { type: 'progress' }>) => void;

  constructor(proc: Proc) {
    super(proc, (report) => {
      if (report.type === 'progress') {
        this.onProgress?.(report);
      }
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

  override next<T extends FleetReport['type']>(
    type: T,
    timeoutMs = 180_000,
  ): Promise<Extract<FleetReport, { type: T }>> {
    return super.next(type, timeoutMs);
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

/** Devices per fleet process by default: more in one process and its event loop answers late. */
const DEVICES_PER_WORKER = 2_500;
const MAX_WORKERS = 4;

/** The default number of fleet processes for `devices` probe devices. */
export function fleetWorkersFor(devices: number): number {
  return Math.min(MAX_WORKERS, Math.max(1, Math.ceil(devices / DEVICES_PER_WORKER)));
}

/**
 * Handshakes under way at once, across the group: nine tenths of the kernel's cap on a listening
 * socket's accept queue (net.core.somaxconn, 4096 here). Ten thousand connects at once overflow it
 * whatever the server does (nstat: ListenOverflows), the kernel drops the handshakes, and the clients
 * try again after 1, 3, 7 s: the bench would measure TCP's retransmission timer.
 */
export function handshakeWindow(): number {
  let somaxconn = 4096;
  try {
    somaxconn = Number(readFileSync('/proc/sys/net/core/somaxconn', 'utf8').trim()) || somaxconn;
  } catch {
    // not Linux
  }
  return Math.max(100, Math.floor(somaxconn * 0.9));
}

/** How often a group's merged progress is reported while devices connect. */
const PROGRESS_EVERY_MS = 5_000;

type Connected = Extract<FleetReport, { type: 'connected' }>;
type Progress = Extract<FleetReport, { type: 'progress' }>;

const addCounts = (into: Record<string, number>, from: Record<string, number>) => {
  for (const [key, n] of Object.entries(from)) {
    into[key] = (into[key] ?? 0) + n;
  }
  return into;
};

/**
 * Probe devices spread over several fleet-worker processes. One process holding ten thousand
 * socket.io clients spends its one thread on their handshakes, heartbeats and timers: it answers late,
 * and stamps a task:assign late, so the bench would measure itself. Each worker takes a contiguous
 * share of the tokens; reports are merged.
 */
export class FleetGroup {
  private constructor(readonly fleets: Fleet[]) {}

  /** At least one worker; `workers` is capped by the number of devices. */
  static spawn(name: string, workers: number, devices: number): FleetGroup {
    const n = Math.max(1, Math.min(workers, devices));
    return new FleetGroup(Array.from({ length: n }, (_, i) => Fleet.spawn(n === 1 ? name : `${name}-${i + 1}`)));
  }

  get procs(): Proc[] {
    return this.fleets.map((f) => f.proc);
  }

  /**
   * Starts the probes of every worker at once and resolves when each has settled all of its own,
   * with the reports merged. `onProgress` gets the sum of the workers' latest reports.
   */
  async connectProbes(
    server: string,
    tokens: string[],
    models: string[] | string[][],
    onProgress?: (progress: Progress) => void,
  ): Promise<Connected> {
    // One list for every device, or one per token.
    const perToken = models.length > 0 && Array.isArray(models[0]) ? (models as string[][]) : undefined;
    const share = Math.ceil(tokens.length / this.fleets.length);
    const window = Math.ceil(handshakeWindow() / this.fleets.length);
    const latest: (Progress | undefined)[] = this.fleets.map(() => undefined);
    const reports = this.fleets.map((fleet, i) => {
      fleet.onProgress = (p) => (latest[i] = p);
      const connected = fleet.next('connected').then((r) => {
        latest[i] = {
          type: 'progress',
          announced: r.connectMs.length,
          connectErrors: r.connectErrors,
          disconnects: r.disconnects,
        };
        return r;
      });
      fleet.send({
        type: 'start',
        mode: 'probe',
        server,
        tokens: tokens.slice(i * share, (i + 1) * share),
        models: perToken ? [] : (models as string[]),
        modelsOf: perToken?.slice(i * share, (i + 1) * share),
        window,
      });
      return connected;
    });
    const ticker = onProgress && setInterval(() => onProgress(FleetGroup.sum(latest)), PROGRESS_EVERY_MS);
    try {
      const all = await Promise.all(reports);
      return {
        type: 'connected',
        connectMs: all.flatMap((r) => r.connectMs),
        failed: all.reduce((n, r) => n + r.failed, 0),
        connectErrors: all.reduce((acc, r) => addCounts(acc, r.connectErrors), {}),
        disconnects: all.reduce((acc, r) => addCounts(acc, r.disconnects), {}),
      };
    } finally {
      clearInterval(ticker);
    }
  }

  private static sum(reports: (Progress | undefined)[]): Progress {
    const sum: Progress = { type: 'progress', announced: 0, connectErrors: {}, disconnects: {} };
    for (const r of reports) {
      if (r) {
        sum.announced += r.announced;
        addCounts(sum.connectErrors, r.connectErrors);
        addCounts(sum.disconnects, r.disconnects);
      }
    }
    return sum;
  }

  /** Every worker's task:assign times since the last collection. */
  async collectAssigns(): Promise<[string, number][]> {
    return (await Promise.all(this.fleets.map((f) => f.collectAssigns()))).flat();
  }

  async stop(): Promise<void> {
    await Promise.all(this.fleets.map((f) => f.stop()));
  }
}
