import { Command, InvalidArgumentError, Option } from 'commander';
import type { BenchOptions } from './context';
import { DEFAULT_EMBED_DIMENSIONS, DEFAULT_EMBED_INPUT_MS } from './upstream';

/** A full run and a --quick one; an option given on the command line wins over both. */
const DEFAULTS = {
  full: {
    durationS: 8,
    warmupS: 3,
    concurrency: [1, 16, 64],
    devices: 1000,
    streams: 1000,
    rates: [50, 100, 200, 400, 600, 800, 1000, 1200, 1400, 1600, 1800],
    throughputDevices: 100,
    faninRate: 50,
    faninDurationS: 40,
    queues: 2000,
    queuesRate: 100,
    usageTasks: 10_000_000,
    usageRuns: 7,
    clusterRate: 300,
    clusterStreams: 16,
    clusterDevices: 40,
    embedInputs: 1000,
    embedRuns: 7,
    budgetsRate: 500,
    budgetsRounds: 4,
    budgetsWindowS: 5,
    retentionTasks: 10_000_000,
    retentionRate: 500,
    retentionRounds: 6,
    retentionWindowS: 30,
  },
  quick: {
    durationS: 2,
    warmupS: 1,
    concurrency: [1, 4],
    devices: 50,
    streams: 50,
    rates: [50, 100],
    throughputDevices: 10,
    faninRate: 20,
    faninDurationS: 2,
    queues: 100,
    queuesRate: 20,
    usageTasks: 200_000,
    usageRuns: 3,
    clusterRate: 100,
    clusterStreams: 4,
    clusterDevices: 10,
    embedInputs: 200,
    embedRuns: 2,
    budgetsRate: 100,
    budgetsRounds: 2,
    budgetsWindowS: 2,
    retentionTasks: 200_000,
    retentionRate: 100,
    retentionRounds: 2,
    retentionWindowS: 3,
  },
};

const positive = (value: string) => {
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0) {
    throw new InvalidArgumentError('must be a positive number');
  }
  return n;
};
const positiveInt = (value: string) => {
  if (!/^[1-9][0-9]*$/.test(value)) {
    throw new InvalidArgumentError('must be a whole number above 0');
  }
  return Number(value);
};
const intList = (value: string) => value.split(',').map((v) => positiveInt(v.trim()));
const scenarioList = (known: string[]) => (value: string) => {
  const names = value.split(',').map((s) => s.trim());
  for (const name of names) {
    if (!known.includes(name)) {
      throw new InvalidArgumentError(`unknown scenario "${name}"; known: ${known.join(', ')}`);
    }
  }
  return names;
};

/** The command line of `npm run bench`; `known` are the scenario names. */
export function parseOptions(argv: string[], known: string[]): BenchOptions {
  const program = new Command('bench')
    .description(
      'Switchyard benchmark: relay overhead, throughput, device fan-in, queues, open streams (issue 6), usage queries',
    )
    .addOption(
      new Option('--scenarios <list>', `comma-separated: ${known.join(',')}`)
        .argParser(scenarioList(known))
        .default(known),
    )
    .addOption(new Option('--duration <s>', 'seconds measured per step [8; quick 2]').argParser(positive))
    .addOption(new Option('--warmup <s>', 'seconds of warm-up before each scenario [3; quick 1]').argParser(positive))
    .addOption(new Option('--concurrency <list>', 'relay: concurrent streams [1,16,64; quick 1,4]').argParser(intList))
    .addOption(new Option('--devices <n>', 'fan-in: devices on one dispatcher [1000; quick 50]').argParser(positiveInt))
    .addOption(
      new Option(
        '--fleet-workers <n>',
        'fan-in: processes the devices are spread over [one per 2500 devices, at most 4]',
      ).argParser(positiveInt),
    )
    .addOption(new Option('--streams <n>', 'open streams [1000; quick 50]').argParser(positiveInt))
    .addOption(
      new Option(
        '--rates <list>',
        'throughput: offered completions/s [50,100,200,400,600,800,1000,1200,1400,1600,1800; quick 50,100]',
      ).argParser(intList),
    )
    .addOption(
      new Option('--throughput-devices <n>', 'throughput: idle sim devices [100; quick 10]').argParser(positiveInt),
    )
    .addOption(
      new Option('--fanin-rate <n>', 'fan-in: requests/s while measuring assignment [50; quick 20]').argParser(
        positiveInt,
      ),
    )
    .addOption(
      new Option('--fanin-duration <s>', 'fan-in: seconds of that load measured [40; quick 2]').argParser(positive),
    )
    .addOption(
      new Option(
        '--queues <n>',
        'queues: queues on one dispatcher, half direct (an org and its device each), half network [2000; quick 100]',
      ).argParser(positiveInt),
    )
    .addOption(
      new Option('--queues-rate <n>', 'queues: requests/s spread across the queues [100; quick 20]').argParser(
        positiveInt,
      ),
    )
    .addOption(
      new Option('--usage-tasks <n>', 'usage: tasks of the big organization [10000000; quick 200000]').argParser(
        positiveInt,
      ),
    )
    .addOption(new Option('--usage-runs <n>', 'usage: timed runs per query [7; quick 3]').argParser(positiveInt))
    .addOption(
      new Option('--cluster-rate <n>', 'cluster: non-streamed completions/s offered [300; quick 100]').argParser(
        positiveInt,
      ),
    )
    .addOption(
      new Option('--cluster-streams <n>', 'cluster: concurrent streams, closed loop [16; quick 4]').argParser(
        positiveInt,
      ),
    )
    .addOption(
      new Option('--cluster-devices <n>', 'cluster: sim devices per model (two models) [40; quick 10]').argParser(
        positiveInt,
      ),
    )
    .addOption(
      new Option('--embed-inputs <n>', 'embeddings: inputs of the one request [1000; quick 200]').argParser(
        positiveInt,
      ),
    )
    .addOption(
      new Option('--embed-runs <n>', 'embeddings: timed requests per leg and encoding [7; quick 2]').argParser(
        positiveInt,
      ),
    )
    .addOption(
      new Option('--embed-devices <n>', 'embeddings: devices of the parallel leg, each with its own runtime')
        .argParser(positiveInt)
        .default(4),
    )
    .addOption(
      new Option('--embed-batch-max <n>', "embeddings: the api's EMBED_BATCH_MAX [the api's default]").argParser(
        positiveInt,
      ),
    )
    .addOption(
      new Option(
        '--embed-input-ms <ms>',
        "embeddings: the fake runtime's time per input (one GPU, one batch at a time)",
      )
        .argParser(positive)
        .default(DEFAULT_EMBED_INPUT_MS),
    )
    .addOption(
      new Option('--embed-dimensions <n>', "embeddings: the fake runtime's vector length")
        .argParser(positiveInt)
        .default(DEFAULT_EMBED_DIMENSIONS),
    )
    .addOption(
      new Option(
        '--budgets-rate <n>',
        'budgets: completions/s offered in every window, with and without budgets [500; quick 100]',
      ).argParser(positiveInt),
    )
    .addOption(
      new Option(
        '--budgets-rounds <n>',
        'budgets: rounds, each a window without and one with budgets [4; quick 2]',
      ).argParser(positiveInt),
    )
    .addOption(
      new Option('--budgets-window <s>', 'budgets: seconds measured per window [5; quick 2]').argParser(positive),
    )
    .addOption(
      new Option(
        '--retention-tasks <n>',
        'retention: tasks of the big organization in the month deleted [10000000; quick 200000]',
      ).argParser(positiveInt),
    )
    .addOption(
      new Option('--retention-rate <n>', 'retention: completions/s offered in every window [500; quick 100]').argParser(
        positiveInt,
      ),
    )
    .addOption(
      new Option(
        '--retention-rounds <n>',
        'retention: rounds, each a window without the deletion and one with it, and one without at the end [6; quick 2]',
      ).argParser(positiveInt),
    )
    .addOption(
      new Option('--retention-window <s>', 'retention: seconds measured per window [30; quick 3]').argParser(positive),
    )
    .addOption(new Option('--relay-tokens <n>', 'relay: tokens per reply').argParser(positiveInt).default(32))
    .addOption(new Option('--ttft-ms <n>', 'relay: upstream time to first token').argParser(positive).default(50))
    .addOption(
      new Option('--token-interval-ms <n>', 'relay: upstream time between tokens').argParser(positive).default(10),
    )
    .option('--cpu-prof', 'run api and dispatcher under node --cpu-prof (bench/results/profiles) and summarise', false)
    .option('--agent-processes', 'relay: run each device as its own switchyard-device process', false)
    .option('--quick', 'tiny sizes and durations: a smoke test of the harness', false)
    .option('--no-docs', 'do not rewrite the results section of docs/benchmarks.md')
    .addOption(
      new Option('--database-url <url>', 'the bench database (dropped and re-created)')
        .env('BENCH_DATABASE_URL')
        .default('postgresql://postgres@127.0.0.1:5432/switchyard_bench'),
    )
    .addOption(
      new Option('--redis-url <url>', 'the bench Redis database (flushed)')
        .env('BENCH_REDIS_URL')
        .default('redis://127.0.0.1:6379/14'),
    );
  program.parse(argv);
  const raw = program.opts<{
    scenarios: string[];
    duration?: number;
    warmup?: number;
    concurrency?: number[];
    devices?: number;
    fleetWorkers?: number;
    streams?: number;
    rates?: number[];
    throughputDevices?: number;
    faninRate?: number;
    faninDuration?: number;
    queues?: number;
    queuesRate?: number;
    usageTasks?: number;
    usageRuns?: number;
    clusterRate?: number;
    clusterStreams?: number;
    clusterDevices?: number;
    embedInputs?: number;
    embedRuns?: number;
    embedDevices: number;
    embedBatchMax?: number;
    embedInputMs: number;
    embedDimensions: number;
    budgetsRate?: number;
    budgetsRounds?: number;
    budgetsWindow?: number;
    retentionTasks?: number;
    retentionRate?: number;
    retentionRounds?: number;
    retentionWindow?: number;
    relayTokens: number;
    ttftMs: number;
    tokenIntervalMs: number;
    cpuProf: boolean;
    agentProcesses: boolean;
    quick: boolean;
    docs: boolean;
    databaseUrl: string;
    redisUrl: string;
  }>();
  const d = raw.quick ? DEFAULTS.quick : DEFAULTS.full;
  return {
    scenarios: raw.scenarios,
    durationS: raw.duration ?? d.durationS,
    warmupS: raw.warmup ?? d.warmupS,
    concurrency: raw.concurrency ?? d.concurrency,
    devices: raw.devices ?? d.devices,
    fleetWorkers: raw.fleetWorkers,
    streams: raw.streams ?? d.streams,
    rates: raw.rates ?? d.rates,
    throughputDevices: raw.throughputDevices ?? d.throughputDevices,
    faninRate: raw.faninRate ?? d.faninRate,
    faninDurationS: raw.faninDuration ?? d.faninDurationS,
    queues: raw.queues ?? d.queues,
    queuesRate: raw.queuesRate ?? d.queuesRate,
    usageTasks: raw.usageTasks ?? d.usageTasks,
    usageRuns: raw.usageRuns ?? d.usageRuns,
    clusterRate: raw.clusterRate ?? d.clusterRate,
    clusterStreams: raw.clusterStreams ?? d.clusterStreams,
    clusterDevices: raw.clusterDevices ?? d.clusterDevices,
    embedInputs: raw.embedInputs ?? d.embedInputs,
    embedRuns: raw.embedRuns ?? d.embedRuns,
    embedDevices: raw.embedDevices,
    embedBatchMax: raw.embedBatchMax,
    embedInputMs: raw.embedInputMs,
    embedDimensions: raw.embedDimensions,
    budgetsRate: raw.budgetsRate ?? d.budgetsRate,
    budgetsRounds: raw.budgetsRounds ?? d.budgetsRounds,
    budgetsWindowS: raw.budgetsWindow ?? d.budgetsWindowS,
    retentionTasks: raw.retentionTasks ?? d.retentionTasks,
    retentionRate: raw.retentionRate ?? d.retentionRate,
    retentionRounds: raw.retentionRounds ?? d.retentionRounds,
    retentionWindowS: raw.retentionWindow ?? d.retentionWindowS,
    relayTokens: raw.relayTokens,
    ttftMs: raw.ttftMs,
    tokenIntervalMs: raw.tokenIntervalMs,
    cpuProf: raw.cpuProf,
    agentProcesses: raw.agentProcesses,
    quick: raw.quick,
    // A smoke test must not replace the published numbers.
    docs: raw.docs && !raw.quick,
    databaseUrl: raw.databaseUrl,
    redisUrl: raw.redisUrl,
  };
}
