import type { Fixtures, BenchTarget, Proc, ProfileOptions, Service } from './stack';

/** Everything the command line decides. */
export interface BenchOptions {
  scenarios: string[];
  /** Seconds measured per step (one concurrency, one offered rate, one hold). */
  durationS: number;
  /** Seconds of warm-up before a scenario's first measured step. */
  warmupS: number;
  concurrency: number[];
  /** Devices of the fan-in scenario. */
  devices: number;
  /** Processes the fan-in devices are spread over; undefined: one per 2,500 devices, at most 4. */
  fleetWorkers?: number;
  /** Open streams of the streams scenario. */
  streams: number;
  /** Offered loads of the throughput scenario, completions per second. */
  rates: number[];
  throughputDevices: number;
  /** Offered load while assignment latency is measured in the fan-in scenario. */
  faninRate: number;
  /**
   * Seconds of that load measured. Longer than the other steps: the bench collects the dispatcher's garbage
   * just before (to read its memory), and its next mark-compact comes 15–20 s later; a window of 8 s would
   * never hold one.
   */
  faninDurationS: number;
  /** Queues of the queues scenario (half direct, half network), and the requests/s spread across them. */
  queues: number;
  queuesRate: number;
  /** Usage: tasks of the big organization in the generated month, and timed runs per query. */
  usageTasks: number;
  usageRuns: number;
  /** Cluster: non-streamed completions/s offered, concurrent streams, and sim devices per model. */
  clusterRate: number;
  clusterStreams: number;
  clusterDevices: number;
  /** Embeddings: inputs of the one request, timed requests per leg and encoding, devices of the parallel leg. */
  embedInputs: number;
  embedRuns: number;
  embedDevices: number;
  /** Embeddings: the api's EMBED_BATCH_MAX for the scenario; undefined: the api's default. */
  embedBatchMax?: number;
  /** Embeddings: the fake runtime's time per input, and its vectors' length. */
  embedInputMs: number;
  embedDimensions: number;
  /** Budgets: the offered load (completions/s) of every window, the rounds (a window each way), a window's seconds. */
  budgetsRate: number;
  budgetsRounds: number;
  budgetsWindowS: number;
  /** Retention: tasks of the big organization in the month deleted, the offered load, the rounds, a window's seconds. */
  retentionTasks: number;
  retentionRate: number;
  retentionRounds: number;
  retentionWindowS: number;
  relayTokens: number;
  ttftMs: number;
  tokenIntervalMs: number;
  cpuProf: boolean;
  /** Relay: one switchyard-device process per device instead of all devices in one process. */
  agentProcesses: boolean;
  quick: boolean;
  docs: boolean;
  databaseUrl: string;
  redisUrl: string;
}

export interface Ctx {
  opts: BenchOptions;
  target: BenchTarget;
  fixtures: Fixtures;
  apiKey: string;
  /** The run's timestamp, in file names. */
  stamp: string;
  log(message: string): void;
  /** Where this run's profiles go, when it profiles. */
  profileDir: string | null;
  /** Every process the bench started, so that an interrupted run can stop them all. */
  track(proc: Proc): Proc;
  /**
   * Marks the start and the end of a scenario's measured load (after its warm-up and setup), so that
   * profile summaries count only the samples taken under load.
   */
  markLoad(phase: 'start' | 'end'): void;
}

/** A span of the monotonic clock in microseconds: the clock of V8's profiles and of process.hrtime. */
export interface Window {
  startUs: number;
  endUs: number;
}

export const monotonicUs = () => Number(process.hrtime.bigint() / 1000n);

/** One of the targets, as measured. */
export interface TargetCheck {
  target: string;
  goal: string;
  measured: string;
  /** null when the scenario could not measure it. */
  pass: boolean | null;
  /**
   * True when the floor of the design, measured in the same run (BullMQ alone, the floor chain), misses
   * the goal too: a miss that no change short of another design can mend. Absent when no floor applies.
   */
  floorMisses?: boolean;
}

export interface ScenarioResult {
  name: string;
  title: string;
  /** The scenario's own table, in Markdown. */
  table: string;
  notes: string[];
  targets: TargetCheck[];
  /** Everything measured, for the results file. */
  data: Record<string, unknown>;
  profiles?: { api?: string; dispatcher?: string };
}

export interface Stack {
  api: Service;
  dispatcher: Service;
  profiles: { api?: ProfileOptions; dispatcher?: ProfileOptions };
}

export const MB = 1024 * 1024;
export const KB = 1024;
