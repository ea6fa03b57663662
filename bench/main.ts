import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Command, InvalidArgumentError, Option } from 'commander';
import { monotonicUs } from './lib/context';
import type { BenchOptions, Ctx, ScenarioResult, Stack, Window } from './lib/context';
import { machineInfo } from './lib/procfs';
import { summarizeProfile } from './lib/profile';
import type { ProfileSummary } from './lib/profile';
import { currentCommit, renderReport, writeDocs, writeJson } from './lib/report';
import type { RunReport } from './lib/report';
import { Fixtures, ROOT, resetDatabase, resetRedis, startApi, startDispatcher } from './lib/stack';
import type { Proc, ProfileOptions } from './lib/stack';
import { faninScenario } from './scenarios/fanin';
import { relayScenario } from './scenarios/relay';
import { streamsScenario } from './scenarios/streams';
import { throughputScenario } from './scenarios/throughput';

/**
 * `npm run bench`: starts Switchyard's processes on the local Postgres and Redis (a database and a
 * Redis database of the bench's own, wiped first), runs the scenarios of issue 6, prints the tables,
 * and writes bench/results/<date>.json and the results section of docs/benchmarks.md.
 */
const SCENARIOS = {
  relay: relayScenario,
  throughput: throughputScenario,
  fanin: faninScenario,
  streams: streamsScenario,
} as const;
type ScenarioName = keyof typeof SCENARIOS;

/** A full run and a --quick one; an option given on the command line wins over both. */
const DEFAULTS = {
  full: {
    durationS: 8,
    warmupS: 3,
    concurrency: [1, 16, 64],
    devices: 1000,
    streams: 1000,
    rates: [50, 100, 200, 400, 600, 800, 1000, 1200, 1400],
    throughputDevices: 100,
    faninRate: 50,
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
const scenarioList = (value: string) => {
  const names = value.split(',').map((s) => s.trim());
  for (const name of names) {
    if (!(name in SCENARIOS)) {
      throw new InvalidArgumentError(`unknown scenario "${name}"; known: ${Object.keys(SCENARIOS).join(', ')}`);
    }
  }
  return names;
};

function parseOptions(argv: string[]): BenchOptions {
  const program = new Command('bench')
    .description('Switchyard benchmark: relay overhead, throughput, device fan-in, open streams (issue 6)')
    .addOption(
      new Option('--scenarios <list>', 'comma-separated: relay,throughput,fanin,streams')
        .argParser(scenarioList)
        .default(Object.keys(SCENARIOS)),
    )
    .addOption(new Option('--duration <s>', 'seconds measured per step [8; quick 2]').argParser(positive))
    .addOption(new Option('--warmup <s>', 'seconds of warm-up before each scenario [3; quick 1]').argParser(positive))
    .addOption(new Option('--concurrency <list>', 'relay: concurrent streams [1,16,64; quick 1,4]').argParser(intList))
    .addOption(new Option('--devices <n>', 'fan-in: devices on one dispatcher [1000; quick 50]').argParser(positiveInt))
    .addOption(new Option('--streams <n>', 'open streams [1000; quick 50]').argParser(positiveInt))
    .addOption(
      new Option(
        '--rates <list>',
        'throughput: offered completions/s [50,100,200,400,600,800,1000,1200,1400; quick 50,100]',
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
    streams?: number;
    rates?: number[];
    throughputDevices?: number;
    faninRate?: number;
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
    streams: raw.streams ?? d.streams,
    rates: raw.rates ?? d.rates,
    throughputDevices: raw.throughputDevices ?? d.throughputDevices,
    faninRate: raw.faninRate ?? d.faninRate,
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

/** 2025-01-31T14-05-09Z: sortable, and valid in file names. */
const fileStamp = (date: Date) =>
  date
    .toISOString()
    .replace(/\.\d+Z$/, 'Z')
    .replace(/:/g, '-');

async function main(): Promise<void> {
  const opts = parseOptions(process.argv);
  const startedAt = new Date();
  const t0 = performance.now();
  const stamp = fileStamp(startedAt);
  const tracked = new Set<Proc>();
  const log = (message: string) =>
    process.stderr.write(`[bench ${((performance.now() - t0) / 1000).toFixed(1)}s] ${message}\n`);
  const stopAll = async () => {
    await Promise.all([...tracked].map((p) => p.stop(5_000)));
  };
  let interrupted = false;
  process.on('SIGINT', () => {
    if (interrupted) {
      process.exit(130);
    }
    interrupted = true;
    log('interrupted: stopping every process the bench started');
    void stopAll().finally(() => process.exit(130));
  });

  if (!existsSync(join(ROOT, 'dist/apps/api/src/main.js'))) {
    throw new Error('no build: run `node scripts/build.mjs` (npm run bench does) first');
  }
  const machine = machineInfo();
  const target = { databaseUrl: opts.databaseUrl, redisUrl: opts.redisUrl };
  log(`preparing ${new URL(target.databaseUrl).pathname.slice(1)} and Redis ${target.redisUrl}`);
  await resetDatabase(target);
  await resetRedis(target);
  const fixtures = new Fixtures(target);
  const { key } = await fixtures.tenant();
  const profileDir = opts.cpuProf ? join(ROOT, 'bench/results/profiles', stamp) : null;
  let load: Partial<Window> = {};
  const ctx: Ctx = {
    opts,
    target,
    fixtures,
    apiKey: key,
    stamp,
    log,
    profileDir,
    track: (proc) => {
      tracked.add(proc);
      void proc.exited.then(() => tracked.delete(proc));
      return proc;
    },
    markLoad: (phase) => {
      if (phase === 'start') {
        load = { startUs: monotonicUs() };
      } else {
        load.endUs = monotonicUs();
      }
    },
  };

  const results: ScenarioResult[] = [];
  const failures: RunReport['failures'] = [];
  const profiles: RunReport['profiles'] = {};
  try {
    for (const name of opts.scenarios as ScenarioName[]) {
      const profileFor = (which: string): ProfileOptions | undefined =>
        profileDir ? { dir: profileDir, name: `${name}-${which}.cpuprofile` } : undefined;
      log(`${name}: starting api and dispatcher${profileDir ? ' under --cpu-prof' : ''}`);
      load = {};
      let stack: Stack | null = null;
      try {
        const [api, dispatcher] = await Promise.all([
          startApi(target, profileFor('api')),
          startDispatcher(target, profileFor('dispatcher')),
        ]);
        ctx.track(api.proc);
        ctx.track(dispatcher.proc);
        stack = { api, dispatcher, profiles: { api: profileFor('api'), dispatcher: profileFor('dispatcher') } };
        results.push(await SCENARIOS[name](ctx, stack));
      } catch (error) {
        const message = error instanceof Error ? (error.stack ?? error.message) : String(error);
        log(`${name} failed: ${message}`);
        failures.push({ scenario: name, error: message });
      } finally {
        if (stack) {
          await Promise.all([stack.api.proc.stop(), stack.dispatcher.proc.stop()]);
          for (const proc of [stack.api.proc, stack.dispatcher.proc]) {
            // The processes log at warn: errors there explain failed requests.
            const errors = proc.output.split('\n').filter((line) => /"level":(50|60)/.test(line));
            if (errors.length > 0) {
              log(
                `${name}: ${proc.name} logged ${errors.length} error(s) (in its last 64 KB); the first: ${errors[0].slice(0, 1500)}`,
              );
            }
          }
          const summaries: { api?: ProfileSummary; dispatcher?: ProfileSummary } = {};
          for (const which of ['api', 'dispatcher'] as const) {
            const profile = stack.profiles[which];
            const file = profile && join(profile.dir, profile.name);
            if (file && existsSync(file)) {
              const window =
                load.startUs !== undefined ? { startUs: load.startUs, endUs: load.endUs ?? Infinity } : undefined;
              summaries[which] = summarizeProfile(file, ROOT, window);
            } else if (file) {
              log(`${name}: no profile was written for ${which}`);
            }
          }
          if (summaries.api || summaries.dispatcher) {
            profiles[name] = summaries;
          }
        }
      }
    }
  } finally {
    await stopAll();
    await fixtures.close();
  }

  const report: RunReport = {
    date: startedAt.toISOString(),
    commit: currentCommit(),
    machine,
    options: opts,
    durationS: (performance.now() - t0) / 1000,
    loadAverageEnd: machineInfo().loadAverage,
    scenarios: results,
    failures,
    profiles,
  };
  process.stdout.write(`\n${renderReport(report, 1)}`);
  const jsonFile = join(ROOT, 'bench/results', `${opts.quick ? 'quick-' : ''}${stamp}.json`);
  await writeJson(jsonFile, {
    version: 1,
    date: report.date,
    commit: report.commit,
    machine,
    options: { ...opts, databaseUrl: undefined, redisUrl: undefined },
    duration_s: Math.round(report.durationS),
    load_average_end: report.loadAverageEnd,
    targets: results.flatMap((s) => s.targets),
    scenarios: Object.fromEntries(results.map((s) => [s.name, { title: s.title, notes: s.notes, ...s.data }])),
    failures,
    profiles: Object.fromEntries(
      Object.entries(profiles).map(([name, p]) => [
        name,
        Object.fromEntries(
          Object.entries(p).map(([which, s]) => [which, { ...s, top: s.top, byOrigin: s.byOrigin.slice(0, 12) }]),
        ),
      ]),
    ),
  });
  log(`wrote ${jsonFile}`);
  if (opts.docs) {
    log(`wrote ${await writeDocs(report)}`);
  }
  if (failures.length) {
    process.exitCode = 1;
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`bench failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
