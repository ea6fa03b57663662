import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { monotonicUs } from './lib/context';
import type { BenchOptions, Ctx, ScenarioResult, Stack, Window } from './lib/context';
import { parseOptions } from './lib/options';
import { machineInfo } from './lib/procfs';
import { summarizeProfile } from './lib/profile';
import type { ProfileSummary } from './lib/profile';
import { currentCommit, renderReport, writeDocs, writeJson } from './lib/report';
import type { RunReport } from './lib/report';
import { Fixtures, ROOT, resetDatabase, resetRedis, startApi, startDispatcher } from './lib/stack';
import type { Proc, ProfileOptions } from './lib/stack';
import { budgetsScenario } from './scenarios/budgets';
import { clusterScenario } from './scenarios/cluster';
import { embeddingsScenario } from './scenarios/embeddings';
import { faninScenario } from './scenarios/fanin';
import { fairnessScenario } from './scenarios/fairness';
import { hostileScenario } from './scenarios/hostile';
import { queuesScenario } from './scenarios/queues';
import { relayScenario } from './scenarios/relay/scenario';
import { resumeScenario } from './scenarios/resume';
import { retentionScenario } from './scenarios/retention';
import { streamsScenario } from './scenarios/streams';
import { throughputScenario } from './scenarios/throughput';
import { usageScenario } from './scenarios/usage';

/**
 * `npm run bench`: starts Switchyard's processes on the local Postgres and Redis (a database and a
 * Redis database of the bench's own, wiped first), runs the scenarios of issue 6 (with the fan-in
 * and queues targets of issue 14, the budgets' cost of issue 39, and the usage queries of issue 16, which
 * need a database only),
 * prints the tables, and writes bench/results/<date>.json and the results sections of
 * docs/benchmarks.md.
 */
const SCENARIOS = {
  relay: relayScenario,
  throughput: throughputScenario,
  fanin: faninScenario,
  queues: queuesScenario,
  streams: streamsScenario,
  fairness: fairnessScenario,
  hostile: hostileScenario,
  resume: resumeScenario,
  embeddings: embeddingsScenario,
  budgets: budgetsScenario,
  usage: (ctx: Ctx) => usageScenario(ctx),
  cluster: (ctx: Ctx) => clusterScenario(ctx),
  retention: (ctx: Ctx) => retentionScenario(ctx),
} as const;
type ScenarioName = keyof typeof SCENARIOS;

/** The api's settings a scenario's options ask for: the embeddings scenario's batch size, when given. */
function apiSettings(name: ScenarioName, opts: BenchOptions): Record<string, string> {
  return name === 'embeddings' && opts.embedBatchMax !== undefined
    ? { EMBED_BATCH_MAX: String(opts.embedBatchMax) }
    : {};
}

/** 2025-01-31T14-05-09Z: sortable, and valid in file names. */
const fileStamp = (date: Date) =>
  date
    .toISOString()
    .replace(/\.\d+Z$/, 'Z')
    .replace(/:/g, '-');

async function main(): Promise<void> {
  const opts = parseOptions(process.argv, Object.keys(SCENARIOS));
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
      if (name === 'usage' || name === 'cluster' || name === 'retention') {
        // usage: a database of its own and the code of the reports, no api or dispatcher to start;
        // cluster: a Redis Cluster of its own, and its own api and dispatcher on it;
        // retention: a database of its own (a copy of a generated month), and its own api and dispatcher on it.
        try {
          results.push(await SCENARIOS[name](ctx));
        } catch (error) {
          const message = error instanceof Error ? (error.stack ?? error.message) : String(error);
          log(`${name} failed: ${message}`);
          failures.push({ scenario: name, error: message });
        }
        continue;
      }
      log(`${name}: starting api and dispatcher${profileDir ? ' under --cpu-prof' : ''}`);
      load = {};
      let stack: Stack | null = null;
      try {
        const [api, dispatcher] = await Promise.all([
          startApi(target, profileFor('api'), apiSettings(name, opts)),
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
