import type { BenchOptions, ScenarioResult, TargetCheck } from '../../lib/context';
import { mdTable, num, signed } from '../../lib/format';
import { rounded } from '../../lib/stats';
import type { Summary } from '../../lib/stats';
import { legJson } from './legs';
import type { Leg } from './legs';
import { STAGES, STAGE_TITLES } from './stages';
import type { Stage } from './stages';

/** The scenario's title, in the report and in the note of a skipped run. */
export const RELAY_TITLE = 'Relay overhead (streamed, fake OpenAI-compatible upstream)';

/** What one concurrency measured: the three legs, the relay's TTFT stages and its costs per 1000 tokens. */
export interface Level {
  concurrency: number;
  direct: Leg;
  floor: Leg;
  relay: Leg;
  stages: Record<Stage, Summary>;
  /** The six commands Redis ran most during the relay leg, per 1000 tokens relayed. */
  redisPer1000Tokens: [string, number][];
  redisTotalPer1000Tokens: number;
  /** The same count during the floor chain's leg (server-wide: the idle relay's background included). */
  floorRedisTotalPer1000Tokens: number;
  /** CPU ms per 1000 tokens by process group, through Switchyard and through the floor chain. */
  cpuPer1000Tokens: Record<string, number>;
  floorCpuPer1000Tokens: Record<string, number>;
}

/** What the report is made of, besides the levels. */
export interface RelayRun {
  opts: BenchOptions;
  devices: number;
  agentArgs: string[];
  /** The CPU groups' names, in the order of the CPU table's columns. */
  cpuGroups: string[];
  levels: Level[];
}

/** The legs side by side, a row per concurrency: TTFT and ITL percentiles, what the relay adds, rates, errors. */
function legsTable(levels: Level[]): string {
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
  return mdTable(
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
}

/** Where the relay's time to first token goes, a row per concurrency. */
function stageTable(levels: Level[]): string {
  return mdTable(
    ['streams', ...STAGES.map((s) => `${STAGE_TITLES[s]} p50/p99`)],
    levels.map((l) => [
      String(l.concurrency),
      ...STAGES.map((s) => `${num(l.stages[s].p50)} / ${num(l.stages[s].p99)}`),
    ]),
    Array(STAGES.length + 1).fill('r') as 'r'[],
  );
}

/** CPU per 1000 tokens by process group: a row through Switchyard and a row through the floor chain per level. */
function cpuTable(levels: Level[], groups: string[]): string {
  return mdTable(
    ['streams', ...groups],
    levels.flatMap((l) => [
      [String(l.concurrency), ...groups.map((g) => num(l.cpuPer1000Tokens[g], 0))],
      [`${l.concurrency}, floor chain`, ...groups.map((g) => num(l.floorCpuPer1000Tokens[g], 0))],
    ]),
    Array(groups.length + 1).fill('r') as 'r'[],
  );
}

/** Issue 14's targets, each judged at the level it names (null when that level was not run). */
function targets(levels: Level[]): TargetCheck[] {
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
  return [
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
      target: 'Relay: TTFT added minus the floor chain’s, p50 at 1 / 16 streams',
      goal: '≤ +2 / ≤ +2 ms',
      measured:
        one && sixteen
          ? `${signed(one.relay.ttft.p50 - one.floor.ttft.p50)} / ${signed(sixteen.relay.ttft.p50 - sixteen.floor.ttft.p50)} ms`
          : 'not run',
      pass:
        one && sixteen
          ? one.relay.ttft.p50 - one.floor.ttft.p50 <= 2 && sixteen.relay.ttft.p50 - sixteen.floor.ttft.p50 <= 2
          : null,
    },
    {
      target: 'Relay: Redis commands per 1000 relayed tokens at 16 streams',
      goal: '≤ 1300',
      measured: sixteen
        ? `${num(sixteen.redisTotalPer1000Tokens, 0)} (floor chain ${num(sixteen.floorRedisTotalPer1000Tokens, 0)})`
        : 'not run',
      pass: sixteen ? sixteen.redisTotalPer1000Tokens <= 1300 : null,
      floorMisses: sixteen ? sixteen.floorRedisTotalPer1000Tokens > 1300 : undefined,
    },
    {
      target: 'Relay: Redis CPU ms per 1000 relayed tokens at 16 streams',
      goal: '≤ 40',
      measured: sixteen
        ? `${num(sixteen.cpuPer1000Tokens.redis, 0)} (floor chain ${num(sixteen.floorCpuPer1000Tokens.redis, 0)})`
        : 'not run',
      pass: sixteen ? sixteen.cpuPer1000Tokens.redis <= 40 : null,
      floorMisses: sixteen ? sixteen.floorCpuPer1000Tokens.redis > 40 : undefined,
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
}

/** What the tables measure and how, the Redis commands per level, and the first errors. */
function notes({ opts, devices, agentArgs, levels }: RelayRun): string[] {
  const failures = levels.flatMap((l) => [l.direct.firstError, l.relay.firstError]).filter(Boolean);
  const floorFailures = levels.map((l) => l.floor.firstError).filter(Boolean);
  return [
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
        `; server-wide counts); the floor chain, ${num(l.floorRedisTotalPer1000Tokens, 0)}.`,
    ),
    "Floor chain = bench/floor-worker.ts: an api, a dispatcher and devices in processes of their own with the relay's hops and " +
      'nothing else (HTTP in, LPUSH + PUBLISH, SUBSCRIBE, an atomic take (RPOP) in one round trip, socket.io to a device, the ' +
      'upstream over a kept-alive connection, socket.io back, XADD, a blocking XREAD, SSE out): no authentication, validation, ' +
      'task state, records, fairness or metrics. What it adds to the direct leg is the floor of this design on this machine.',
    ...(failures.length ? [`First error: ${failures[0]}`] : []),
    ...(floorFailures.length ? [`First floor chain error: ${floorFailures[0]}`] : []),
  ];
}

/** A level as the results file keeps it. */
function levelJson(l: Level) {
  return {
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
    floor_chain_redis_commands_per_1000_tokens: Math.round(l.floorRedisTotalPer1000Tokens),
    relay_cpu_ms_per_1000_tokens: Object.fromEntries(
      Object.entries(l.cpuPer1000Tokens).map(([k, v]) => [k, Math.round(v)]),
    ),
    floor_chain_cpu_ms_per_1000_tokens: Object.fromEntries(
      Object.entries(l.floorCpuPer1000Tokens).map(([k, v]) => [k, Math.round(v)]),
    ),
  };
}

/** The scenario's result: its tables, targets, notes and the data of the results file. */
export function relayReport(run: RelayRun): ScenarioResult {
  const { opts, devices, levels } = run;
  return {
    name: 'relay',
    title: RELAY_TITLE,
    table:
      `${legsTable(levels)}\n\nWhere the relay's time to first token goes (ms, per request):\n\n${stageTable(levels)}\n\n` +
      `CPU ms per 1000 tokens relayed (through Switchyard, and through the floor chain in its own leg, from /proc; ` +
      `the floor chain's api, dispatcher and devices under the same names, Postgres unused):\n\n${cpuTable(levels, run.cpuGroups)}`,
    notes: notes(run),
    targets: targets(levels),
    data: {
      devices,
      upstream: { ttft_ms: opts.ttftMs, token_interval_ms: opts.tokenIntervalMs, tokens: opts.relayTokens },
      levels: levels.map(levelJson),
    },
  };
}
