import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { join } from 'node:path';
import { closedLoop } from '../lib/load';
import { keepAliveAgent, streamChat } from '../lib/client';
import type { StreamResult } from '../lib/client';
import type { Ctx, ScenarioResult, Stack, TargetCheck } from '../lib/context';
import { mdTable, num, signed } from '../lib/format';
import { Fleet } from '../lib/fleet';
import { cpuDelta, sampleCpu } from '../lib/procfs';
import type { CpuGroup } from '../lib/procfs';
import { PostgresProcesses, callsDelta, redisCommandCalls, redisPid } from '../lib/services';
import type { Proc } from '../lib/stack';
import { DIST, sleep, startNode, waitOnline } from '../lib/stack';
import { median, rounded, summarize } from '../lib/stats';
import type { Summary } from '../lib/stats';

const MODEL = 'bench-relay';
/** Agents are started this many at a time: each is a Node process that takes a moment of CPU to load. */
const AGENT_START_BATCH = 8;

/** What one leg (direct or relay) measured at one concurrency. */
interface Leg {
  requests: number;
  errors: number;
  firstError?: string;
  ttft: Summary;
  itl: Summary;
  /** Per stream: tokens after the first / time from first to last token. */
  decodeTps: number;
  /** Per stream: tokens / time from request to last token. */
  e2eTps: number;
  /** Tokens delivered per second over the whole step. */
  aggregateTps: number;
}

function measureLeg(results: StreamResult[], elapsedMs: number): Leg {
  const ok = results.filter((r) => r.complete && r.contentAt.length > 0);
  const ttft: number[] = [];
  const itl: number[] = [];
  const decode: number[] = [];
  const e2e: number[] = [];
  let tokens = 0;
  for (const r of ok) {
    const times = r.contentAt;
    tokens += times.length;
    ttft.push(times[0] - r.sentAt);
    for (let i = 1; i < times.length; i++) {
      itl.push(times[i] - times[i - 1]);
    }
    const last = times[times.length - 1];
    if (times.length > 1 && last > times[0]) {
      decode.push(((times.length - 1) * 1000) / (last - times[0]));
    }
    e2e.push((times.length * 1000) / (last - r.sentAt));
  }
  const failed = results.filter((r) => !(r.complete && r.contentAt.length > 0));
  return {
    requests: results.length,
    errors: failed.length,
    firstError: failed[0]?.error ?? (failed[0] ? `status ${failed[0].status}, incomplete` : undefined),
    ttft: summarize(ttft),
    itl: summarize(itl),
    decodeTps: median(decode),
    e2eTps: median(e2e),
    aggregateTps: (tokens * 1000) / elapsedMs,
  };
}

function legJson(leg: Leg) {
  return {
    requests: leg.requests,
    errors: leg.errors,
    ...(leg.firstError ? { first_error: leg.firstError } : {}),
    ttft_ms: rounded(leg.ttft),
    itl_ms: rounded(leg.itl),
    decode_tokens_per_s_median: Math.round(leg.decodeTps * 10) / 10,
    e2e_tokens_per_s_median: Math.round(leg.e2eTps * 10) / 10,
    aggregate_tokens_per_s: Math.round(leg.aggregateTps),
  };
}

const STAGES = ['intake', 'queue', 'dispatch', 'upstream', 'device', 'return'] as const;
type Stage = (typeof STAGES)[number];
const STAGE_TITLES: Record<Stage, string> = {
  intake: 'sent → queued_at',
  queue: 'queued_at → assigned_at',
  dispatch: 'assigned_at → at upstream',
  upstream: 'upstream TTFT',
  device: 'first token → dispatcher',
  return: 'dispatcher → client',
};

/**
 * Splits each relayed request's time to first token into stages, from the client's clock, the task
 * row's timestamps and the upstream's record of when the request arrived and its first token left.
 */
async function ttftStages(
  ctx: Ctx,
  upstream: Proc,
  marked: Map<string, StreamResult>,
): Promise<Record<Stage, Summary>> {
  const items = await new Promise<[string, [number, number]][]>((resolve) => {
    const timer = setTimeout(() => resolve([]), 10_000);
    upstream.child.once('message', (m: { type: string; items: [string, [number, number]][] }) => {
      clearTimeout(timer);
      resolve(m.items);
    });
    upstream.child.send({ type: 'timings' });
  });
  const atUpstream = new Map(items);
  const addresses = [...marked.values()].map((r) => r.taskAddress).filter((a): a is string => a !== undefined);
  const rows = addresses.length
    ? await ctx.fixtures.db.$queryRaw<{ address: string; q: number; a: number | null; f: number | null }[]>`
        SELECT address,
               (extract(epoch from queued_at) * 1000)::float8 AS q,
               (extract(epoch from assigned_at) * 1000)::float8 AS a,
               (extract(epoch from first_token_at) * 1000)::float8 AS f
        FROM tasks WHERE address = ANY(${addresses})`
    : [];
  const byAddress = new Map(rows.map((r) => [r.address, r]));
  const samples: Record<Stage, number[]> = {
    intake: [],
    queue: [],
    dispatch: [],
    upstream: [],
    device: [],
    return: [],
  };
  const epoch = (t: number) => performance.timeOrigin + t;
  for (const [marker, result] of marked) {
    const row = result.taskAddress ? byAddress.get(result.taskAddress) : undefined;
    const up = atUpstream.get(marker);
    if (!row || row.a === null || row.f === null || !up || result.contentAt.length === 0) {
      continue;
    }
    samples.intake.push(row.q - epoch(result.sentAt));
    samples.queue.push(row.a - row.q);
    samples.dispatch.push(up[0] - row.a);
    samples.upstream.push(up[1] - up[0]);
    samples.device.push(row.f - up[1]);
    samples.return.push(epoch(result.contentAt[0]) - row.f);
  }
  return Object.fromEntries(STAGES.map((s) => [s, summarize(samples[s])])) as Record<Stage, Summary>;
}

/** Starts a bench worker process that reports its port over IPC once it is ready. */
async function startWorker(
  ctx: Ctx,
  name: string,
  script: string,
  args: string[],
): Promise<{ proc: Proc; port: number }> {
  const proc = ctx.track(
    startNode(
      name,
      script,
      args,
      { PATH: process.env.PATH },
      {
        stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
      },
    ),
  );
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name} did not start:\n${proc.output}`)), 30_000);
    proc.child.once('message', (m: { port: number }) => {
      clearTimeout(timer);
      resolve(m.port);
    });
  });
  return { proc, port };
}

/** Starts the fake upstream in a process of its own and returns its port. */
function startUpstream(ctx: Ctx): Promise<{ proc: Proc; port: number }> {
  const options = {
    models: [MODEL],
    ttftMs: ctx.opts.ttftMs,
    tokenIntervalMs: ctx.opts.tokenIntervalMs,
    tokens: ctx.opts.relayTokens,
  };
  return startWorker(ctx, 'upstream', 'bench/upstream-worker.js', [JSON.stringify(options)]);
}

/**
 * The floor chain (bench/floor-worker.ts): an api, a dispatcher and devices with the relay's processes
 * and hops and nothing else, in front of the same upstream. Returns its api's URL.
 */
async function startFloorChain(
  ctx: Ctx,
  upstreamPort: number,
  devices: number,
): Promise<{ url: URL; pids: { api: number; dispatcher: number; devices: number } }> {
  const script = 'bench/floor-worker.js';
  const api = await startWorker(ctx, 'floor-api', script, ['api', ctx.target.redisUrl]);
  const dispatcher = await startWorker(ctx, 'floor-dispatcher', script, ['dispatcher', ctx.target.redisUrl]);
  const fleet = await startWorker(ctx, 'floor-devices', script, [
    'devices',
    ctx.target.redisUrl,
    `http://127.0.0.1:${dispatcher.port}`,
    `http://127.0.0.1:${upstreamPort}/v1/chat/completions`,
    String(devices),
  ]);
  return {
    url: new URL(`http://127.0.0.1:${api.port}/v1/chat/completions`),
    pids: { api: api.proc.pid, dispatcher: dispatcher.proc.pid, devices: fleet.proc.pid },
  };
}

export async function relayScenario(ctx: Ctx, stack: Stack): Promise<ScenarioResult> {
  const { opts } = ctx;
  const title = 'Relay overhead (streamed, fake OpenAI-compatible upstream)';
  if (!existsSync(join(DIST, 'apps/device/src/backends/openai.backend.js'))) {
    return {
      name: 'relay',
      title,
      table: '_Not run: the device agent has no `openai` backend in this build._',
      notes: [],
      targets: [],
      data: { skipped: 'no openai backend' },
    };
  }
  const upstream = await startUpstream(ctx);
  const devices = Math.max(...opts.concurrency);
  await ctx.fixtures.enableModel(MODEL);
  const tokens = await ctx.fixtures.devices(devices, 'relay');
  const agentArgs = [
    ...['--backend', 'openai', '--upstream', `http://127.0.0.1:${upstream.port}/v1`],
    ...['--model', MODEL, '--log-level', 'warn'],
  ];
  const agents: Proc[] = [];
  let fleet: Fleet | null = null;
  const closers: (() => Promise<void>)[] = [];
  try {
    if (opts.agentProcesses) {
      ctx.log(`relay: starting ${devices} switchyard-device processes (${agentArgs.slice(0, 4).join(' ')})`);
      for (let i = 0; i < tokens.length; i += AGENT_START_BATCH) {
        const batch = tokens
          .slice(i, i + AGENT_START_BATCH)
          .map((token, j) =>
            ctx.track(
              startNode(
                `agent-${i + j}`,
                'apps/device/src/main.js',
                ['--server', stack.dispatcher.url, '--token', token, ...agentArgs],
                { PATH: process.env.PATH },
              ),
            ),
          );
        agents.push(...batch);
        await waitOnline(ctx.target.redisUrl, MODEL, agents.length, { procs: agents, timeoutMs: 60_000 });
      }
    } else {
      ctx.log(`relay: starting ${devices} device agents in one process (${agentArgs.slice(0, 4).join(' ')})`);
      fleet = Fleet.spawn('relay-fleet');
      ctx.track(fleet.proc);
      const started = fleet.next('started');
      fleet.send({ type: 'start', mode: 'agents', server: stack.dispatcher.url, tokens, args: agentArgs });
      await started;
      await waitOnline(ctx.target.redisUrl, MODEL, devices, { procs: [fleet.proc], timeoutMs: 120_000 });
    }

    const agent = keepAliveAgent(devices * 2);
    // The same request both ways; the marker lets the upstream time each request it receives.
    const body = (marker: string) =>
      JSON.stringify({
        model: MODEL,
        messages: [{ role: 'user', content: `Tell me something about relays. [bench:${marker}]` }],
        stream: true,
        stream_options: { include_usage: true },
        max_tokens: opts.relayTokens,
      });
    const marked = new Map<string, StreamResult>();
    const direct = {
      url: new URL(`http://127.0.0.1:${upstream.port}/v1/chat/completions`),
      headers: {} as Record<string, string>,
    };
    const relay = {
      url: new URL(`${stack.api.url}/v1/chat/completions`),
      headers: { authorization: `Bearer ${ctx.apiKey}` },
    };
    ctx.log(`relay: starting the floor chain (bench/floor-worker.ts) with ${devices} devices`);
    const chain = await startFloorChain(ctx, upstream.port, devices);
    const floor = { url: chain.url, headers: {} as Record<string, string> };
    const postgres = new PostgresProcesses(ctx.target.databaseUrl);
    await postgres.connect();
    closers.push(() => postgres.close());
    const redis = await redisPid(ctx.target.redisUrl);
    const groups: CpuGroup[] = [
      { name: 'api', pids: () => [stack.api.proc.pid] },
      { name: 'dispatcher', pids: () => [stack.dispatcher.proc.pid] },
      { name: 'agents', pids: () => (fleet ? [fleet.proc.pid] : agents.map((a) => a.pid)) },
      { name: 'upstream', pids: () => [upstream.proc.pid] },
      postgres,
      { name: 'redis', pids: () => (redis ? [redis] : []) },
      { name: 'bench', pids: () => [process.pid] },
    ];
    // The floor chain's processes under the same names, so that each level's CPU has its floor beside it.
    const floorPids: Record<string, number> = {
      api: chain.pids.api,
      dispatcher: chain.pids.dispatcher,
      agents: chain.pids.devices,
    };
    const floorGroups: CpuGroup[] = groups.map((g) => {
      const own = floorPids[g.name];
      return own ? { name: g.name, pids: () => [own] } : g.name === 'postgres' ? { name: g.name, pids: () => [] } : g;
    });
    const run = async (leg: typeof direct, concurrency: number, durationMs: number) => {
      const results: StreamResult[] = [];
      const { elapsedMs } = await closedLoop({
        concurrency,
        durationMs,
        run: async () => {
          const marker = randomUUID();
          const result = await streamChat(leg.url, leg.headers, body(marker), agent).done;
          results.push(result);
          if (leg === relay) {
            marked.set(marker, result);
          }
        },
      });
      return { results, elapsedMs };
    };

    const warmConcurrency = Math.min(16, devices);
    ctx.log(`relay: warm-up ${opts.warmupS}s per leg at ${warmConcurrency} streams`);
    await run(direct, warmConcurrency, opts.warmupS * 1000);
    await run(floor, warmConcurrency, opts.warmupS * 1000);
    await run(relay, warmConcurrency, opts.warmupS * 1000);
    await ttftStages(ctx, upstream.proc, new Map());
    marked.clear();

    const levels: {
      concurrency: number;
      direct: Leg;
      floor: Leg;
      relay: Leg;
      stages: Record<Stage, Summary>;
      redisPer1000Tokens: [string, number][];
      redisTotalPer1000Tokens: number;
      cpuPer1000Tokens: Record<string, number>;
      floorCpuPer1000Tokens: Record<string, number>;
    }[] = [];
    ctx.markLoad('start');
    for (const concurrency of opts.concurrency) {
      ctx.log(
        `relay: ${concurrency} concurrent streams, direct, through the floor chain, then through Switchyard, ${opts.durationS}s each`,
      );
      const d = await run(direct, concurrency, opts.durationS * 1000);
      await sleep(200);
      const floorCpuBefore = await sampleCpu(floorGroups);
      const f = await run(floor, concurrency, opts.durationS * 1000);
      const floorCpu = cpuDelta(floorCpuBefore, await sampleCpu(floorGroups));
      await sleep(200);
      const redisBefore = await redisCommandCalls(ctx.target.redisUrl);
      const cpuBefore = await sampleCpu(groups);
      const r = await run(relay, concurrency, opts.durationS * 1000);
      const cpu = cpuDelta(cpuBefore, await sampleCpu(groups));
      const redisCalls = callsDelta(redisBefore, await redisCommandCalls(ctx.target.redisUrl));
      await sleep(200);
      const relayLeg = measureLeg(r.results, r.elapsedMs);
      const stages = await ttftStages(ctx, upstream.proc, marked);
      marked.clear();
      const relayed = relayLeg.aggregateTps * (r.elapsedMs / 1000);
      const floorLeg = measureLeg(f.results, f.elapsedMs);
      const floorRelayed = floorLeg.aggregateTps * (f.elapsedMs / 1000);
      levels.push({
        concurrency,
        direct: measureLeg(d.results, d.elapsedMs),
        floor: floorLeg,
        relay: relayLeg,
        stages,
        redisPer1000Tokens: redisCalls.slice(0, 6).map(([cmd, n]): [string, number] => [cmd, (n * 1000) / relayed]),
        redisTotalPer1000Tokens: (redisCalls.reduce((a, [, n]) => a + n, 0) * 1000) / relayed,
        cpuPer1000Tokens: Object.fromEntries(
          Object.entries(cpu).map(([name, ms]) => [name, relayed > 0 ? (ms * 1000) / relayed : Number.NaN]),
        ),
        floorCpuPer1000Tokens: Object.fromEntries(
          Object.entries(floorCpu).map(([name, ms]) => [
            name,
            floorRelayed > 0 ? (ms * 1000) / floorRelayed : Number.NaN,
          ]),
        ),
      });
    }
    ctx.markLoad('end');
    agent.destroy();

    const rows = levels.map(({ concurrency, direct: d, floor: f, relay: r }) => [
      String(concurrency),
      `${d.ttft.n}/${r.ttft.n}`,
      `${num(d.ttft.p50)} / ${num(d.ttft.p90)} / ${num(d.ttft.p99)}`,
      `${num(r.ttft.p50)} / ${num(r.ttft.p90)} / ${num(r.ttft.p99)}`,
      `${signed(r.ttft.p50 - d.ttft.p50)} / ${signed(r.ttft.p90 - d.ttft.p90)} / ${signed(r.ttft.p99 - d.ttft.p99)}`,
      `${signed(f.ttft.p50 - d.ttft.p50)} / ${signed(f.ttft.p99 - d.ttft.p99)}`,
      `${signed(f.itl.p99 - d.itl.p99)} / ${num(f.e2eTps / d.e2eTps, 3)}`,
      `${num(d.itl.p50)} / ${num(d.itl.p99)}`,
      `${num(r.itl.p50)} / ${num(r.itl.p99)}`,
      `${signed(r.itl.p50 - d.itl.p50)} / ${signed(r.itl.p99 - d.itl.p99)}`,
      num(r.decodeTps / d.decodeTps, 3),
      num(r.e2eTps / d.e2eTps, 3),
      `${d.errors}/${r.errors}`,
    ]);
    const floorFailures = levels.map((l) => l.floor.firstError).filter(Boolean);
    const table = mdTable(
      [
        'streams',
        'requests direct/relay',
        'TTFT direct p50/p90/p99 (ms)',
        'TTFT relay p50/p90/p99 (ms)',
        'TTFT added p50/p90/p99 (ms)',
        'floor chain: TTFT added p50/p99 (ms)',
        'floor chain: ITL added p99 (ms) / tokens/s vs direct (end to end)',
        'ITL direct p50/p99 (ms)',
        'ITL relay p50/p99 (ms)',
        'ITL added p50/p99 (ms)',
        'tokens/s relay/direct (decode)',
        'tokens/s relay/direct (end to end)',
        'errors direct/relay',
      ],
      rows,
      ['r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
    );

    const stageTable = mdTable(
      ['streams', ...STAGES.map((s) => `${STAGE_TITLES[s]} p50/p99`)],
      levels.map((l) => [
        String(l.concurrency),
        ...STAGES.map((s) => `${num(l.stages[s].p50)} / ${num(l.stages[s].p99)}`),
      ]),
      Array(STAGES.length + 1).fill('r') as 'r'[],
    );
    const cpuTable = mdTable(
      ['streams', ...groups.map((g) => g.name)],
      levels.flatMap((l) => [
        [String(l.concurrency), ...groups.map((g) => num(l.cpuPer1000Tokens[g.name], 0))],
        [`${l.concurrency}, floor chain`, ...groups.map((g) => num(l.floorCpuPer1000Tokens[g.name], 0))],
      ]),
      Array(groups.length + 1).fill('r') as 'r'[],
    );
    // Issue 14's targets, each judged at the level it names (null when that level was not run).
    const level = (n: number) => levels.find((l) => l.concurrency === n);
    const ttftTargets = (
      [
        [1, 2, 6],
        [16, 4, 15],
        [64, 10, 30],
      ] as const
    ).flatMap(([n, p50, p99]): TargetCheck[] => {
      const l = level(n);
      const added = l ? { p50: l.relay.ttft.p50 - l.direct.ttft.p50, p99: l.relay.ttft.p99 - l.direct.ttft.p99 } : null;
      const floorAdded = l
        ? `${signed(l.floor.ttft.p50 - l.direct.ttft.p50)} / ${signed(l.floor.ttft.p99 - l.direct.ttft.p99)}`
        : '';
      return [
        {
          target: `Relay: TTFT added p50 / p99 at ${n} stream${n > 1 ? 's' : ''}`,
          goal: `≤ ${p50} / ≤ ${p99} ms`,
          measured: added ? `${signed(added.p50)} / ${signed(added.p99)} ms (floor chain ${floorAdded})` : 'not run',
          pass: added ? added.p50 <= p50 && added.p99 <= p99 : null,
        },
      ];
    });
    const one = level(1);
    const ours = STAGES.filter((s) => s !== 'upstream');
    const slowest = one ? ours.reduce((a, b) => (one.stages[b].p50 > one.stages[a].p50 ? b : a)) : null;
    const sixteen = level(16);
    const itlAdded16 = sixteen ? sixteen.relay.itl.p99 - sixteen.direct.itl.p99 : null;
    const floorItl16 = sixteen ? sixteen.floor.itl.p99 - sixteen.direct.itl.p99 : null;
    const floorRatio = Math.min(...levels.map((l) => l.floor.e2eTps / l.direct.e2eTps));
    // End to end, not decode only: a relay that stalls and then delivers tokens in bursts has a fast
    // "decode" rate between its first and last token, but the client still waits longer for the answer.
    const ratio = Math.min(...levels.map((l) => l.relay.e2eTps / l.direct.e2eTps));
    const cpu16 = sixteen
      ? {
          api: sixteen.cpuPer1000Tokens.api,
          dispatcher: sixteen.cpuPer1000Tokens.dispatcher,
          floorApi: sixteen.floorCpuPer1000Tokens.api,
          floorDispatcher: sixteen.floorCpuPer1000Tokens.dispatcher,
        }
      : null;
    const targets: TargetCheck[] = [
      ...ttftTargets,
      {
        target: 'Relay: each TTFT stage at 1 stream (upstream TTFT aside), p50',
        goal: '≤ 0.8 ms',
        measured: one && slowest ? `slowest ${STAGE_TITLES[slowest]}: ${num(one.stages[slowest].p50)} ms` : 'not run',
        pass: one && slowest ? one.stages[slowest].p50 <= 0.8 : null,
      },
      {
        target: 'Relay: inter-token latency added p99 at 16 streams',
        goal: '≤ 2 ms',
        measured:
          itlAdded16 === null || floorItl16 === null
            ? 'not run'
            : `${signed(itlAdded16)} ms (floor chain ${signed(floorItl16)})`,
        pass: itlAdded16 === null ? null : itlAdded16 <= 2,
      },
      {
        target: 'Relay: tokens/s relay/direct, end to end (worst level)',
        goal: '≥ 0.99',
        measured: `${num(ratio, 3)} (floor chain ${num(floorRatio, 3)})`,
        pass: ratio >= 0.99,
      },
      {
        target: 'Relay: CPU ms per 1000 tokens at 16 streams, api / dispatcher',
        goal: '≤ 80 / ≤ 80',
        measured: cpu16
          ? `${num(cpu16.api, 0)} / ${num(cpu16.dispatcher, 0)} (floor chain ${num(cpu16.floorApi, 0)} / ${num(cpu16.floorDispatcher, 0)})`
          : 'not run',
        pass: cpu16 ? cpu16.api <= 80 && cpu16.dispatcher <= 80 : null,
      },
    ];
    const failures = levels.flatMap((l) => [l.direct.firstError, l.relay.firstError]).filter(Boolean);
    return {
      name: 'relay',
      title,
      table:
        `${table}\n\nWhere the relay's time to first token goes (ms, per request):\n\n${stageTable}\n\n` +
        `CPU ms per 1000 tokens relayed (through Switchyard, and through the floor chain in its own leg, from /proc; ` +
        `the floor chain's api, dispatcher and devices under the same names, Postgres unused):\n\n${cpuTable}`,
      notes: [
        `Fake upstream: TTFT ${opts.ttftMs} ms, one token every ${opts.tokenIntervalMs} ms, ${opts.relayTokens} tokens, usage chunk, [DONE]; ` +
          `${devices} devices (\`${agentArgs.slice(0, 2).join(' ')}\`, one task each at a time), ` +
          (opts.agentProcesses
            ? 'each its own switchyard-device process'
            : "run as DeviceAgent instances in one process, each built from the switchyard-device arguments by the product's own parser") +
          `; closed loop, ${opts.durationS} s per leg and level.`,
        'TTFT = request sent → first SSE event with content; ITL = gap between successive content events; ' +
          '"added" = relay percentile − direct percentile of the same run. Decode tokens/s = (tokens − 1) / (last − first token), median per stream; ' +
          'end to end = tokens / (last token − request sent).',
        'TTFT stages: request sent → task row written (queued_at: auth, model, presence, insert) → task claimed for a device ' +
          '(assigned_at: enqueue, fetch, claim) → request at the upstream (task:assign, agent, HTTP) → first token written by the upstream ' +
          '(its fixed TTFT) → first output at the dispatcher (first_token_at: agent, socket.io) → first content at the client ' +
          "(Redis Stream, api, SSE); one clock (this machine): queued_at and assigned_at are the api's and the dispatcher's Date.now() " +
          "as the task record holds them (millisecond precision), the upstream's and the client's times are epoch milliseconds with fractions.",
        ...levels.map(
          (l) =>
            `At ${l.concurrency} streams: ${num(l.redisTotalPer1000Tokens, 0)} Redis commands per 1000 tokens relayed (` +
            l.redisPer1000Tokens.map(([cmd, n]) => `${cmd} ${num(n, 0)}`).join(', ') +
            '; server-wide counts).',
        ),
        "Floor chain = bench/floor-worker.ts: an api, a dispatcher and devices in processes of their own with the relay's hops and " +
          'nothing else (HTTP in, LPUSH + PUBLISH, SUBSCRIBE, an atomic take (RPOP) in one round trip, socket.io to a device, the ' +
          'upstream over a kept-alive connection, socket.io back, XADD, a blocking XREAD, SSE out): no authentication, validation, ' +
          'task state, records, fairness or metrics. What it adds to the direct leg is the floor of this design on this machine.',
        ...(failures.length ? [`First error: ${failures[0]}`] : []),
        ...(floorFailures.length ? [`First floor chain error: ${floorFailures[0]}`] : []),
      ],
      targets,
      data: {
        devices,
        upstream: { ttft_ms: opts.ttftMs, token_interval_ms: opts.tokenIntervalMs, tokens: opts.relayTokens },
        levels: levels.map((l) => ({
          concurrency: l.concurrency,
          direct: legJson(l.direct),
          floor_chain: legJson(l.floor),
          relay: legJson(l.relay),
          ttft_added_ms: {
            p50: Math.round((l.relay.ttft.p50 - l.direct.ttft.p50) * 100) / 100,
            p90: Math.round((l.relay.ttft.p90 - l.direct.ttft.p90) * 100) / 100,
            p99: Math.round((l.relay.ttft.p99 - l.direct.ttft.p99) * 100) / 100,
          },
          itl_added_ms: {
            p50: Math.round((l.relay.itl.p50 - l.direct.itl.p50) * 100) / 100,
            p99: Math.round((l.relay.itl.p99 - l.direct.itl.p99) * 100) / 100,
          },
          decode_tps_ratio: Math.round((l.relay.decodeTps / l.direct.decodeTps) * 1000) / 1000,
          e2e_tps_ratio: Math.round((l.relay.e2eTps / l.direct.e2eTps) * 1000) / 1000,
          ttft_stages_ms: Object.fromEntries(STAGES.map((s) => [s, rounded(l.stages[s])])),
          redis_commands_per_1000_tokens: {
            total: Math.round(l.redisTotalPer1000Tokens),
            ...Object.fromEntries(l.redisPer1000Tokens.map(([cmd, n]) => [cmd, Math.round(n)])),
          },
          relay_cpu_ms_per_1000_tokens: Object.fromEntries(
            Object.entries(l.cpuPer1000Tokens).map(([k, v]) => [k, Math.round(v)]),
          ),
          floor_chain_cpu_ms_per_1000_tokens: Object.fromEntries(
            Object.entries(l.floorCpuPer1000Tokens).map(([k, v]) => [k, Math.round(v)]),
          ),
        })),
      },
    };
  } finally {
    for (const close of closers) {
      await close();
    }
    await fleet?.stop();
    await Promise.all(agents.map((a) => a.stop(5_000)));
    upstream.proc.child.send({ type: 'stop' });
    await Promise.race([upstream.proc.exited, sleep(2_000)]);
    await upstream.proc.stop(2_000);
  }
}
