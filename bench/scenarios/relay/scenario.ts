import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { keepAliveAgent } from '../../lib/client';
import type { Ctx, ScenarioResult, Stack } from '../../lib/context';
import { cpuDelta, sampleCpu } from '../../lib/procfs';
import type { CpuGroup } from '../../lib/procfs';
import { PostgresProcesses, callsDelta, redisCommandCalls, redisPid } from '../../lib/services';
import { DIST, sleep } from '../../lib/stack';
import { Upstream } from './direct';
import { FloorChain } from './floor-chain';
import { MODEL, measureLeg, runLeg } from './legs';
import type { LegRun, LegTarget } from './legs';
import { RelayLeg } from './relay-leg';
import { RELAY_TITLE, relayReport } from './report';
import type { Level } from './report';

/** What every level runs on. */
interface Setup {
  direct: LegTarget;
  floor: LegTarget;
  relay: LegTarget;
  relayLeg: RelayLeg;
  /** The processes of the relay by group, and the floor chain's under the same names. */
  groups: CpuGroup[];
  floorGroups: CpuGroup[];
  /** Runs one leg's closed loop on the bench's kept-alive connections. */
  run: (leg: LegTarget, concurrency: number, durationMs: number) => Promise<LegRun>;
}

/** Milliseconds per 1000 tokens by group; NaN when nothing was relayed. */
function per1000Tokens(ms: Record<string, number>, tokens: number): Record<string, number> {
  return Object.fromEntries(
    Object.entries(ms).map(([name, v]) => [name, tokens > 0 ? (v * 1000) / tokens : Number.NaN]),
  );
}

/**
 * The relay scenario: the same streamed requests, at each concurrency, three ways: straight to a fake
 * upstream (direct), through the floor chain, and through Switchyard (relay), each leg in turn for the
 * same time. What the relay adds to the direct leg, where its time to first token goes, and what it
 * costs in CPU and Redis commands per 1000 tokens, beside the floor chain's.
 */
export async function relayScenario(ctx: Ctx, stack: Stack): Promise<ScenarioResult> {
  const { opts } = ctx;
  if (!existsSync(join(DIST, 'apps/device/src/backends/openai.backend.js'))) {
    return {
      name: 'relay',
      title: RELAY_TITLE,
      table: '_Not run: the device agent has no `openai` backend in this build._',
      notes: [],
      targets: [],
      data: { skipped: 'no openai backend' },
    };
  }
  const upstream = await Upstream.start(ctx);
  const devices = Math.max(...opts.concurrency);
  await ctx.fixtures.enableModel(MODEL);
  const tokens = await ctx.fixtures.devices(devices, 'relay');
  const relayLeg = new RelayLeg(ctx, stack, upstream);
  let postgres: PostgresProcesses | null = null;
  try {
    await relayLeg.startDevices(tokens);
    const agent = keepAliveAgent(devices * 2);
    const direct = upstream.directLeg();
    const relay = relayLeg.target();
    ctx.log(`relay: starting the floor chain (bench/floor-worker.ts) with ${devices} devices`);
    const chain = await FloorChain.start(ctx, `${upstream.baseUrl}/chat/completions`, devices);
    const floor = chain.leg();
    const pg = new PostgresProcesses(ctx.target.databaseUrl);
    await pg.connect();
    postgres = pg;
    const redis = await redisPid(ctx.target.redisUrl);
    const groups: CpuGroup[] = [
      { name: 'api', pids: () => [stack.api.proc.pid] },
      { name: 'dispatcher', pids: () => [stack.dispatcher.proc.pid] },
      { name: 'agents', pids: () => relayLeg.devicePids() },
      { name: 'upstream', pids: () => [upstream.proc.pid] },
      pg,
      { name: 'redis', pids: () => (redis ? [redis] : []) },
      { name: 'bench', pids: () => [process.pid] },
    ];
    const floorGroups = chain.cpuGroups(groups);
    const run = (leg: LegTarget, concurrency: number, durationMs: number) =>
      runLeg(leg, agent, opts.relayTokens, concurrency, durationMs);

    const warmConcurrency = Math.min(16, devices);
    ctx.log(`relay: warm-up ${opts.warmupS}s per leg at ${warmConcurrency} streams`);
    await run(direct, warmConcurrency, opts.warmupS * 1000);
    await run(floor, warmConcurrency, opts.warmupS * 1000);
    await run(relay, warmConcurrency, opts.warmupS * 1000);
    await relayLeg.discardStages();

    const levels: Level[] = [];
    ctx.markLoad('start');
    for (const concurrency of opts.concurrency) {
      ctx.log(
        `relay: ${concurrency} concurrent streams, direct, through the floor chain, then through Switchyard, ${opts.durationS}s each`,
      );
      levels.push(await measureLevel(ctx, { direct, floor, relay, relayLeg, groups, floorGroups, run }, concurrency));
    }
    ctx.markLoad('end');
    agent.destroy();
    return relayReport({ opts, devices, agentArgs: relayLeg.agentArgs, cpuGroups: groups.map((g) => g.name), levels });
  } finally {
    await postgres?.close();
    await relayLeg.stop();
    await upstream.stop();
  }
}

/**
 * One concurrency: the direct leg, the floor chain (its CPU sampled), then the relay (its CPU and the
 * server's Redis commands counted), each for the step's duration, with a pause between so that one
 * leg's tail does not run into the next one's counts.
 */
async function measureLevel(ctx: Ctx, setup: Setup, concurrency: number): Promise<Level> {
  const { run, groups, floorGroups } = setup;
  const durationMs = ctx.opts.durationS * 1000;
  const d = await run(setup.direct, concurrency, durationMs);
  await sleep(200);
  const floorRedisBefore = await redisCommandCalls(ctx.target.redisUrl);
  const floorCpuBefore = await sampleCpu(floorGroups);
  const f = await run(setup.floor, concurrency, durationMs);
  const floorCpu = cpuDelta(floorCpuBefore, await sampleCpu(floorGroups));
  const floorRedisCalls = callsDelta(floorRedisBefore, await redisCommandCalls(ctx.target.redisUrl));
  await sleep(200);
  const redisBefore = await redisCommandCalls(ctx.target.redisUrl);
  const cpuBefore = await sampleCpu(groups);
  const r = await run(setup.relay, concurrency, durationMs);
  const relayCpu = cpuDelta(cpuBefore, await sampleCpu(groups));
  const redisCalls = callsDelta(redisBefore, await redisCommandCalls(ctx.target.redisUrl));
  await sleep(200);
  const relay = measureLeg(r);
  const stages = await setup.relayLeg.stages();
  const relayed = relay.aggregateTps * (r.elapsedMs / 1000);
  const floor = measureLeg(f);
  const floorRelayed = floor.aggregateTps * (f.elapsedMs / 1000);
  return {
    concurrency,
    direct: measureLeg(d),
    floor,
    relay,
    stages,
    redisPer1000Tokens: redisCalls.slice(0, 6).map(([cmd, n]): [string, number] => [cmd, (n * 1000) / relayed]),
    redisTotalPer1000Tokens: (redisCalls.reduce((a, [, n]) => a + n, 0) * 1000) / relayed,
    floorRedisTotalPer1000Tokens: (floorRedisCalls.reduce((a, [, n]) => a + n, 0) * 1000) / floorRelayed,
    cpuPer1000Tokens: per1000Tokens(relayCpu, relayed),
    floorCpuPer1000Tokens: per1000Tokens(floorCpu, floorRelayed),
  };
}
