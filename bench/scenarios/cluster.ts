import { performance } from 'node:perf_hooks';
import { startEmbeddedRedisCluster } from '../../apps/cli/src/embedded/embedded-redis-cluster';
import type { ClusterMaster } from '../../apps/cli/src/embedded/embedded-redis-cluster';
import { keepAliveAgent, postJson, streamChat } from '../lib/client';
import type { Ctx, ScenarioResult } from '../lib/context';
import { Fleet } from '../lib/fleet';
import { mdTable, num } from '../lib/format';
import { closedLoop, openLoop } from '../lib/load';
import { cpuDelta, sampleCpu } from '../lib/procfs';
import type { CpuGroup } from '../lib/procfs';
import { callsDelta, redisCommandCalls } from '../lib/services';
import { sleep, startApi, startDispatcher, waitOnline } from '../lib/stack';
import type { BenchTarget, Service } from '../lib/stack';
import {
  DEVICES_PER_DISPATCHER,
  LOADS,
  UTILIZATION,
  capacity,
  redisCommands,
  redisCpu,
  unitCosts,
} from './cluster-capacity';
import type { PhaseCost, UnitCosts } from './cluster-capacity';

/** Two models, so that two queues (two hash tags) carry the load: non-streamed, and streamed. */
const PLAIN = 'bench-cluster-plain';
const STREAMED = 'bench-cluster-stream';
/** Idle sim devices with zero generation time (as in the throughput scenario): a reply of 4 tokens, at once. */
const PLAIN_SIM = ['--sim-ttft-ms', '0', '--sim-tokens-per-second', '0', '--sim-tokens', '4'];
/** Streaming sim devices: 32 tokens at 200 tokens/s after 20 ms. */
const STREAM_TOKENS = 32;
const STREAM_SIM = ['--sim-ttft-ms', '20', '--sim-tokens-per-second', '200', '--sim-tokens', String(STREAM_TOKENS)];
/** Masters of the local cluster; no replicas, so that the machine's cores go to the masters measured. */
const MASTERS = 3;
/**
 * Switchyard on a local Redis Cluster (issue 34): an api and a dispatcher on three masters, a load of
 * non-streamed completions on one model, then streams on another, then the devices idle; each
 * master's commands and CPU per phase, and a capacity model built from the per-unit costs measured.
 */
export async function clusterScenario(ctx: Ctx): Promise<ScenarioResult> {
  const { opts } = ctx;
  ctx.log(`cluster: starting a local Redis Cluster of ${MASTERS} masters`);
  const cluster = await startEmbeddedRedisCluster({ masters: MASTERS, replicasPerMaster: 0 });
  const fleets: Fleet[] = [];
  let api: Service | null = null;
  let dispatcher: Service | null = null;
  try {
    const target: BenchTarget = { ...ctx.target, clusterSeeds: cluster.seeds };
    [api, dispatcher] = await Promise.all([startApi(target), startDispatcher(target)]);
    ctx.track(api.proc);
    ctx.track(dispatcher.proc);
    const masters = await cluster.masters();
    const meter = new ClusterMeter(masters, api, dispatcher);
    const durationMs = opts.durationS * 1000;
    // What the processes cost Redis with no device and no request: subtracted from the idle devices' phase.
    ctx.log(`cluster: api and dispatcher alone for ${opts.durationS}s`);
    const background = await meter.measure('no devices', () => sleep(durationMs));
    for (const [model, args] of [
      [PLAIN, PLAIN_SIM],
      [STREAMED, STREAM_SIM],
    ] as const) {
      await ctx.fixtures.enableModel(model);
      const fleet = Fleet.spawn(`cluster-fleet-${model}`);
      ctx.track(fleet.proc);
      fleets.push(fleet);
      const started = fleet.next('started');
      fleet.send({
        type: 'start',
        mode: 'agents',
        server: dispatcher.url,
        tokens: await ctx.fixtures.devices(opts.clusterDevices, model),
        args: ['--backend', 'sim', '--model', model, '--log-level', 'warn', ...args],
      });
      await started;
      await waitOnline(ctx.target.redisUrl, model, opts.clusterDevices, {
        procs: [fleet.proc],
        clusterSeeds: cluster.seeds,
      });
    }
    ctx.log(`cluster: ${opts.clusterDevices} sim devices online for each of two models`);
    const agent = keepAliveAgent(1024);
    const headers = { authorization: `Bearer ${ctx.apiKey}` };
    const url = new URL(`${api.url}/v1/chat/completions`);
    const plainBody = JSON.stringify({ model: PLAIN, messages: [{ role: 'user', content: 'ping' }], max_tokens: 16 });
    const streamBody = JSON.stringify({
      model: STREAMED,
      messages: [{ role: 'user', content: 'ping' }],
      max_tokens: STREAM_TOKENS,
      stream: true,
    });

    const plain = async (rate: number, durationMs: number) => {
      const tally = new Tally();
      await openLoop({
        rate,
        durationMs,
        maxInFlight: 5_000,
        fire: async () => {
          const r = await postJson(url, headers, plainBody, agent);
          tally.add(r.status === 200, r.error ?? `HTTP ${r.status}: ${r.body.slice(0, 200)}`);
        },
      });
      return tally.result();
    };
    const streams = async (concurrency: number, durationMs: number) => {
      const tally = new Tally();
      let tokens = 0;
      await closedLoop({
        concurrency,
        durationMs,
        run: async () => {
          const r = await streamChat(url, headers, streamBody, agent).done;
          tokens += r.contentAt.length;
          tally.add(r.status === 200 && r.complete, r.error ?? `HTTP ${r.status}`);
        },
      });
      return { ...tally.result(), tokens };
    };

    ctx.log(`cluster: warm-up ${opts.warmupS}s`);
    await Promise.all([plain(opts.clusterRate, opts.warmupS * 1000), streams(2, opts.warmupS * 1000)]);
    await sleep(500);
    ctx.markLoad('start');
    ctx.log(`cluster: ${opts.clusterRate} non-streamed completions/s for ${opts.durationS}s`);
    const a = await meter.measure('completions', () => plain(opts.clusterRate, durationMs));
    await sleep(500);
    ctx.log(`cluster: ${opts.clusterStreams} streams, closed loop, for ${opts.durationS}s`);
    const b = await meter.measure('streams', () => streams(opts.clusterStreams, durationMs));
    await sleep(500);
    ctx.log(`cluster: the ${2 * opts.clusterDevices} devices idle for ${opts.durationS}s`);
    const c = await meter.measure('idle devices', () => sleep(durationMs));
    ctx.markLoad('end');
    agent.destroy();

    const devices = 2 * opts.clusterDevices;
    const costs = unitCosts(a.cost, a.result.completed, b.cost, b.result.tokens, background.cost, c.cost, devices);
    return report(ctx, {
      masters,
      phases: [background.cost, a.cost, b.cost, c.cost],
      costs,
      a: a.result,
      b: b.result,
      devices,
    });
  } finally {
    await Promise.all(fleets.map((f) => f.stop()));
    await Promise.all([api?.proc.stop(), dispatcher?.proc.stop()]);
    await cluster.stop();
  }
}

/** The requests of a phase that succeeded and failed, and the first failure. */
class Tally {
  private completed = 0;
  private errors = 0;
  private firstError: string | undefined;

  add(ok: boolean, failure: string): void {
    if (ok) {
      this.completed++;
    } else {
      this.errors++;
      this.firstError ??= failure;
    }
  }

  result(): { completed: number; errors: number; firstError?: string } {
    return { completed: this.completed, errors: this.errors, firstError: this.firstError };
  }
}

/** Samples each master's command counts and CPU, and the api's and the dispatcher's CPU, around a phase. */
class ClusterMeter {
  private readonly groups: CpuGroup[];

  constructor(
    private readonly masters: ClusterMaster[],
    api: Service,
    dispatcher: Service,
  ) {
    this.groups = [
      ...masters.map((m) => ({ name: `m${m.port}`, pids: () => [m.pid] })),
      { name: 'api', pids: () => [api.proc.pid] },
      { name: 'dispatcher', pids: () => [dispatcher.proc.pid] },
    ];
  }

  async measure<T>(name: string, run: () => Promise<T>): Promise<{ result: T; cost: PhaseCost }> {
    const calls = () => Promise.all(this.masters.map((m) => redisCommandCalls(`redis://127.0.0.1:${m.port}`)));
    const callsBefore = await calls();
    const cpuBefore = await sampleCpu(this.groups);
    const started = performance.now();
    const result = await run();
    const elapsedMs = performance.now() - started;
    const cpu = cpuDelta(cpuBefore, await sampleCpu(this.groups));
    const callsAfter = await calls();
    return {
      result,
      cost: {
        name,
        elapsedMs,
        masters: this.masters.map((m, i) => ({
          port: m.port,
          commands: callsDelta(callsBefore[i], callsAfter[i]).reduce((sum, [, n]) => sum + n, 0),
          cpuMs: cpu[`m${m.port}`] ?? 0,
        })),
        apiCpuMs: cpu.api ?? 0,
        dispatcherCpuMs: cpu.dispatcher ?? 0,
      },
    };
  }
}

interface Measured {
  masters: ClusterMaster[];
  phases: PhaseCost[];
  costs: UnitCosts;
  a: { completed: number; errors: number; firstError?: string };
  b: { tokens: number; completed: number; errors: number; firstError?: string };
  devices: number;
}

function report(ctx: Ctx, m: Measured): ScenarioResult {
  const { costs } = m;
  const rows = m.phases.flatMap((phase) => {
    const commands = redisCommands(phase);
    const cpu = redisCpu(phase);
    const s = phase.elapsedMs / 1000;
    return phase.masters.map((master) => [
      phase.name,
      String(master.port),
      num(master.commands / s, 0),
      `${num((100 * master.commands) / Math.max(1, commands), 0)} %`,
      num(master.cpuMs / s, 1),
      `${num((100 * master.cpuMs) / Math.max(1e-9, cpu), 0)} %`,
    ]);
  });
  const table = mdTable(
    ['phase', 'master (port)', 'commands/s', 'share of commands', 'CPU ms/s', 'share of CPU'],
    rows,
    ['l', 'r', 'r', 'r', 'r', 'r'],
  );
  const plan = capacity(costs);
  const capacityTable = mdTable(
    ['load', 'masters', 'apis', 'dispatchers', 'from (CPU ms, this run)'],
    [
      [
        `${LOADS.completionsPerS.toLocaleString('en')} short completions/s`,
        String(plan.completions.masters),
        String(plan.completions.apis),
        String(plan.completions.dispatchers),
        `per completion: Redis ${num(costs.perCompletion.redis, 3)}, api ${num(costs.perCompletion.api, 2)}, dispatcher ${num(costs.perCompletion.dispatcher, 2)}`,
      ],
      [
        `${LOADS.tokensPerS.toLocaleString('en')} relayed tokens/s`,
        String(plan.tokens.masters),
        String(plan.tokens.apis),
        String(plan.tokens.dispatchers),
        `per 1,000 tokens: Redis ${num(costs.per1000Tokens.redis, 1)}, api ${num(costs.per1000Tokens.api, 0)}, dispatcher ${num(costs.per1000Tokens.dispatcher, 0)}`,
      ],
      [
        `${LOADS.devices.toLocaleString('en')} connected devices`,
        String(plan.devices.masters),
        '—',
        String(plan.devices.dispatchers),
        `per device-second: ${num(costs.perDeviceSecond.commands, 2)} Redis commands (≈ ${num(costs.perDeviceSecond.redis, 4)} CPU ms), dispatcher ${num(costs.perDeviceSecond.dispatcher, 4)}; ${DEVICES_PER_DISPATCHER.toLocaleString('en')} devices per dispatcher`,
      ],
    ],
    ['l', 'r', 'r', 'r', 'l'],
  );
  const firstError = m.a.firstError ?? m.b.firstError;
  return {
    name: 'cluster',
    title: `Redis Cluster (${MASTERS} masters): load per master, and a capacity model`,
    table: `${table}\n\n${capacityTable}`,
    notes: [
      `A local Redis Cluster of ${MASTERS} masters and no replicas (apps/cli/src/embedded/embedded-redis-cluster.ts), one api ` +
        `and one dispatcher on it (REDIS_CLUSTER_NODES); ${ctx.opts.clusterDevices} sim devices for each of two models, so ` +
        'that two queues, two hash tags, carry the load. Phases of ' +
        `${ctx.opts.durationS} s: ${ctx.opts.clusterRate} non-streamed completions/s offered on one model (\`${PLAIN_SIM.join(' ')}\`; ` +
        `${m.a.completed} completed, ${m.a.errors} failed); ${ctx.opts.clusterStreams} streams in a closed loop on the other ` +
        `(\`${STREAM_SIM.join(' ')}\`; ${m.b.completed} completed, ${m.b.tokens} tokens, ${m.b.errors} failed); then the ` +
        `${m.devices} devices idle; first, before any device, the api and the dispatcher alone, whose background ` +
        '(instance heartbeats, the record writers\u2019 blocking reads of every partition) the idle devices\u2019 phase is ' +
        'net of. Commands per master from its INFO commandstats (script calls included), CPU from /proc/<pid>/stat of its ' +
        'redis-server (10 ms ticks: a light phase is counted in commands, its CPU estimated at the completions phase\u2019s ' +
        'CPU per command).',
      `Per unit, all masters together: ${num(costs.perCompletion.commands)} commands and ${num(costs.perCompletion.redis, 3)} ` +
        `CPU ms per completion; ${num(costs.per1000Tokens.commands, 0)} commands and ${num(costs.per1000Tokens.redis, 1)} CPU ms ` +
        `per 1,000 tokens (32-token answers, their per-request work included).`,
      `Capacity model: each process at ${UTILIZATION * 100} % of one core (headroom for bursts, a failover and neighbours); ` +
        'instances = ⌈load × CPU ms per unit ÷ (1000 × utilization)⌉, per load on its own (add the rows for a mix); a ' +
        `dispatcher holds at most ${DEVICES_PER_DISPATCHER.toLocaleString('en')} devices (issue 14's fan-in target). The ` +
        'costs are this machine\u2019s, measured with the bench client and the devices on the same cores: on dedicated cores ' +
        'they are lower, so the counts are an upper bound. Masters are sized by CPU: the key space spreads tasks over 16 ' +
        'partitions per kind, so that load spreads evenly once there are several models.',
      `Hot shard: a (model, pool) queue keeps its BullMQ keys and fair-share state under one hash tag, so one master ` +
        `does that queue's share of every completion; here the busiest master took ${num(costs.hotShare * 100, 0)} % of the ` +
        `Redis CPU of the one-model phase, which caps one queue near ${num(plan.queueCeiling, 0)} completions/s on one ` +
        'master at the utilization above. Beyond that a popular model is spread by serving it from several pools (each its ' +
        'own queue and tag: organizations\u2019 own devices, or the network), not by a bigger master; splitting one pool\u2019s ' +
        'queue in shards is not built.',
      ...(firstError ? [`First error: ${firstError}`] : []),
    ],
    targets: [],
    data: {
      masters: m.masters.map((master) => ({ port: master.port, slots: master.slots })),
      phases: m.phases.map((p) => ({
        name: p.name,
        elapsed_ms: Math.round(p.elapsedMs),
        masters: p.masters.map((x) => ({ port: x.port, commands: x.commands, cpu_ms: Math.round(x.cpuMs) })),
        api_cpu_ms: Math.round(p.apiCpuMs),
        dispatcher_cpu_ms: Math.round(p.dispatcherCpuMs),
      })),
      unit_costs: costs,
      capacity: plan,
      completions: m.a,
      streams: m.b,
    },
  };
}
