import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { batchesOf, loadConfig, sha256Hex } from '@app/common';
import { keepAliveAgent, postJson } from '../lib/client';
import { monotonicUs } from '../lib/context';
import type { Ctx, ScenarioResult, Stack, TargetCheck, Window } from '../lib/context';
import { cpuDelta, machineCpuMs, sampleCpu } from '../lib/procfs';
import type { CpuGroup, CpuSample } from '../lib/procfs';
import { checkAnswer, inputTexts, tokensOf } from '../lib/embedding-vectors';
import { mdTable, num } from '../lib/format';
import { summarizeProfile } from '../lib/profile';
import { PostgresProcesses, redisPid } from '../lib/services';
import { ROOT, baseEnv, recordsWritten, sleep, startNode, waitOnline } from '../lib/stack';
import type { Proc } from '../lib/stack';
import { median, round, rounded, summarize } from '../lib/stats';
import type { EmbedServed, UpstreamOptions } from '../lib/upstream';
import { startWorker } from './relay/worker';

/** The model each fake runtime lists; the catalog's two models are served under it. */
const RUNTIME_MODEL = 'bench-embed';
/** Served by the first device only: the one-device leg. */
const ONE = 'bench-embed-one';
/** Served by every device: the parallel leg. Two models, so that the legs can alternate request by request. */
const ALL = 'bench-embed-all';
/** Issue 38's goals: relayed ≥ 0.9 of direct with one device; with four, ≥ 3× one device (three quarters of linear). */
const RELAY_GOAL = 0.9;
const SCALE_GOAL_SHARE = 0.75;
/** A pause between requests, so that one request's after-work (task records, garbage) is not in the next one's time. */
const PAUSE_MS = 250;
/** The relay's own processes, and the CPU table's columns. */
const RELAY_GROUPS = ['api', 'dispatcher', 'redis', 'postgres'];
const CPU_COLUMNS = ['api', 'dispatcher', 'redis', 'postgres', 'relay', 'agents', 'runtimes', 'bench', 'other'];
const FORMATS = ['float', 'base64'] as const;
type Format = (typeof FORMATS)[number];
const LEGS = ['direct', 'direct-batched', 'relay-1', 'relay-n'] as const;
type LegName = (typeof LEGS)[number];

/** A fake runtime (bench/upstream-worker.ts) in a process of its own: one GPU, one batch at a time. */
class Runtime {
  private constructor(
    readonly proc: Proc,
    readonly port: number,
  ) {}

  static async start(ctx: Ctx, index: number): Promise<Runtime> {
    const options: UpstreamOptions = {
      models: [RUNTIME_MODEL],
      ttftMs: 0,
      tokenIntervalMs: 0,
      tokens: 1,
      embedInputMs: ctx.opts.embedInputMs,
      embedDimensions: ctx.opts.embedDimensions,
    };
    const { proc, port } = await startWorker(ctx, `runtime-${index}`, 'bench/upstream-worker.js', [
      JSON.stringify(options),
    ]);
    return new Runtime(proc, port);
  }

  get baseUrl(): string {
    return `http://127.0.0.1:${this.port}/v1`;
  }

  /** The /v1/embeddings requests it served since the last call. */
  log(): Promise<EmbedServed[]> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${this.proc.name} did not send its log`)), 10_000);
      const onMessage = (m: { type?: string; items?: EmbedServed[] }) => {
        if (m.type === 'embed-log') {
          clearTimeout(timer);
          this.proc.child.off('message', onMessage);
          resolve(m.items ?? []);
        }
      };
      this.proc.child.on('message', onMessage);
      this.proc.child.send({ type: 'embed-log' });
    });
  }

  async stop(): Promise<void> {
    if (this.proc.running) {
      this.proc.child.send({ type: 'stop' });
      await Promise.race([this.proc.exited, sleep(2_000)]);
    }
    await this.proc.stop(2_000);
  }
}

/** One timed request (or, for direct-batched, the batches one after another) and what came of it. */
interface Run {
  ms: number;
  ok: boolean;
  problem?: string;
  taskAddresses: string[];
  /** Epoch ms: the request sent, the whole answer read. */
  sentAt: number;
  endAt: number;
  /** What each runtime served for it, by runtime index. */
  served: EmbedServed[][];
  /** CPU ms of each process group over the request. */
  cpuMs: Record<string, number>;
  machineBusyMs: number;
}

/** Where a request's time went, from the runtimes' own log of what they served for it. */
interface Breakdown {
  /** Request sent → the first batch reached a runtime. */
  headMs: number;
  /** The busiest runtime's computing (its GPU time). */
  computeMs: number;
  /** That runtime's rendering of its answers (computed → answer written). */
  renderMs: number;
  /** At each runtime, its answer written → its next batch arrived: what the path adds per batch. */
  gapsMs: number[];
  /** The last answer written by a runtime → the client had the whole answer. */
  tailMs: number;
  /** The runtimes' GPUs busy over the request, as a share of (request time × runtimes that served it). */
  busyShare: number;
}

const epochNow = () => performance.timeOrigin + performance.now();

function breakdown(run: Run): Breakdown | null {
  const used = run.served.filter((s) => s.length > 0).map((s) => [...s].sort((a, b) => a.arrivedAt - b.arrivedAt));
  if (used.length === 0) {
    return null;
  }
  const all = used.flat();
  let busiest = used[0];
  const computeOf = (s: EmbedServed[]) => s.reduce((n, e) => n + e.computeEnd - e.computeStart, 0);
  for (const s of used) {
    if (computeOf(s) > computeOf(busiest)) {
      busiest = s;
    }
  }
  const gapsMs: number[] = [];
  for (const s of used) {
    for (let i = 1; i < s.length; i++) {
      gapsMs.push(s[i].arrivedAt - s[i - 1].writtenAt);
    }
  }
  const wall = run.endAt - run.sentAt;
  return {
    headMs: Math.min(...all.map((e) => e.arrivedAt)) - run.sentAt,
    computeMs: computeOf(busiest),
    renderMs: busiest.reduce((n, e) => n + e.writtenAt - e.computeEnd, 0),
    gapsMs,
    tailMs: run.endAt - Math.max(...all.map((e) => e.writtenAt)),
    busyShare: used.reduce((n, s) => n + computeOf(s), 0) / (wall * used.length),
  };
}

/** A task record's times, epoch ms (the api's and the dispatcher's clocks: this machine's). */
interface TaskTimes {
  deviceId: string | null;
  queuedAt: number;
  assignedAt: number | null;
  finishedAt: number | null;
}

/**
 * A relayed request's path, from its task records beside the runtimes' log: the batches a device
 * served, in the order it was given them, matched with the requests its runtime received in order.
 */
interface PathParts {
  /** Request sent → its batches queued (the api: authentication, model, routing, limits, the task rows, the enqueue). */
  intakeMs: number;
  /** First batch queued → first batch assigned (the dispatcher). */
  queueMs: number;
  /** A batch assigned → it reached its runtime (task:assign over socket.io, the agent's request). */
  toRuntimeMs: number[];
  /** A runtime's answer written → the batch's task finished (the agent reads, checks, encodes and sends the vectors; the dispatcher takes them and `done`). */
  toFinishedMs: number[];
  /** A batch finished → the device's next batch assigned (the dispatcher). */
  toNextAssignMs: number[];
  /** The last batch finished → the client has the whole answer (the api reads the vectors, renders, sends; the client reads). */
  answerMs: number;
}

function pathParts(run: Run, deviceIds: string[], times: Map<string, TaskTimes>): PathParts | null {
  const tasks = run.taskAddresses.map((a) => times.get(a));
  if (tasks.length === 0 || tasks.some((t) => !t || t.assignedAt === null || t.finishedAt === null)) {
    return null;
  }
  const all = tasks as (TaskTimes & { assignedAt: number; finishedAt: number })[];
  const parts: PathParts = {
    intakeMs: Math.min(...all.map((t) => t.queuedAt)) - run.sentAt,
    queueMs: Math.min(...all.map((t) => t.assignedAt)) - Math.min(...all.map((t) => t.queuedAt)),
    toRuntimeMs: [],
    toFinishedMs: [],
    toNextAssignMs: [],
    answerMs: run.endAt - Math.max(...all.map((t) => t.finishedAt)),
  };
  deviceIds.forEach((id, d) => {
    const mine = all.filter((t) => t.deviceId === id).sort((a, b) => a.assignedAt - b.assignedAt);
    const served = [...run.served[d]].sort((a, b) => a.arrivedAt - b.arrivedAt);
    if (mine.length !== served.length) {
      return;
    }
    mine.forEach((t, k) => {
      parts.toRuntimeMs.push(served[k].arrivedAt - t.assignedAt);
      parts.toFinishedMs.push(t.finishedAt - served[k].writtenAt);
      if (k + 1 < mine.length) {
        parts.toNextAssignMs.push(mine[k + 1].assignedAt - t.finishedAt);
      }
    });
  });
  return parts;
}

/** The medians of a leg's path parts, over its requests (per-batch parts over all its batches). */
function pathStats(parts: PathParts[]) {
  const flat = (pick: (p: PathParts) => number[]) => median(parts.flatMap(pick));
  return {
    requests: parts.length,
    intakeMs: median(parts.map((p) => p.intakeMs)),
    queueMs: median(parts.map((p) => p.queueMs)),
    toRuntimeMs: flat((p) => p.toRuntimeMs),
    toFinishedMs: flat((p) => p.toFinishedMs),
    toNextAssignMs: flat((p) => p.toNextAssignMs),
    answerMs: median(parts.map((p) => p.answerMs)),
  };
}

/** A leg and encoding over its timed runs. */
interface LegStats {
  leg: LegName;
  format: Format;
  runs: number;
  wrong: number;
  firstProblem?: string;
  requestMs: ReturnType<typeof summarize>;
  /** Inputs per second at the median request time. */
  inputsPerS: number;
  headMs: number;
  computeMs: number;
  renderMs: number;
  gapMs: ReturnType<typeof summarize>;
  gapsPerRequest: number;
  tailMs: number;
  busyShare: number;
  /** CPU ms per 1,000 inputs, per process group, and of the whole machine. */
  cpuPer1000: Record<string, number>;
}

function legStats(leg: LegName, format: Format, runs: Run[], inputs: number): LegStats {
  const parts = runs.map(breakdown).filter((b): b is Breakdown => b !== null);
  const requestMs = summarize(runs.map((r) => r.ms));
  const cpu: Record<string, number> = {};
  for (const r of runs) {
    for (const [group, ms] of Object.entries(r.cpuMs)) {
      cpu[group] = (cpu[group] ?? 0) + ms;
    }
    cpu.machine = (cpu.machine ?? 0) + r.machineBusyMs;
  }
  const ours = Object.entries(cpu)
    .filter(([group]) => group !== 'machine')
    .reduce((n, [, ms]) => n + ms, 0);
  // The relay's own processes; the rest of the machine (its other users: the machine is shared).
  cpu.relay = RELAY_GROUPS.reduce((n, group) => n + (cpu[group] ?? 0), 0);
  cpu.other = Math.max(0, (cpu.machine ?? 0) - ours);
  const perThousand = (ms: number) => (ms * 1000) / (inputs * Math.max(1, runs.length));
  const wrong = runs.filter((r) => !r.ok);
  return {
    leg,
    format,
    runs: runs.length,
    wrong: wrong.length,
    firstProblem: wrong[0]?.problem,
    requestMs,
    inputsPerS: (inputs * 1000) / requestMs.p50,
    headMs: median(parts.map((p) => p.headMs)),
    computeMs: median(parts.map((p) => p.computeMs)),
    renderMs: median(parts.map((p) => p.renderMs)),
    gapMs: summarize(parts.flatMap((p) => p.gapsMs)),
    gapsPerRequest: median(parts.map((p) => p.gapsMs.length)),
    tailMs: median(parts.map((p) => p.tailMs)),
    busyShare: median(parts.map((p) => p.busyShare)),
    cpuPer1000: Object.fromEntries(Object.entries(cpu).map(([k, v]) => [k, perThousand(v)])),
  };
}

/**
 * Embeddings (issue 38): one request of `--embed-inputs` inputs, (a) straight to a fake runtime
 * (bench/lib/upstream.ts: vLLM's /v1/embeddings, `--embed-input-ms` of GPU time per input, one batch at
 * a time), in one request and in the api's batches one after another; (b) through Switchyard to one
 * device agent (`--backend openai`) in front of its own runtime; (c) to `--embed-devices` agents, each
 * with its own runtime. The legs alternate request by request, so that a busy moment of the shared
 * machine falls on all of them. Every answer is checked, vector by vector, against what the runtime
 * makes for its input.
 */
export async function embeddingsScenario(ctx: Ctx, stack: Stack): Promise<ScenarioResult> {
  const { embedInputs: inputs, embedRuns: runs, embedDevices: devices, embedDimensions: dimensions } = ctx.opts;
  // What the api was started with (bench/main.ts passes --embed-batch-max on).
  const batchMax = ctx.opts.embedBatchMax ?? loadConfig(baseEnv(ctx.target)).EMBED_BATCH_MAX;
  await ctx.fixtures.enableModel(ONE, 'embedding');
  await ctx.fixtures.enableModel(ALL, 'embedding');
  const tokens = await ctx.fixtures.devices(devices, 'embed');
  const rows = await ctx.fixtures.db.device.findMany({ where: { tokenHash: { in: tokens.map(sha256Hex) } } });
  const deviceIds = tokens.map((t) => rows.find((r) => r.tokenHash === sha256Hex(t))!.id);
  const runtimes: Runtime[] = [];
  const agents: Proc[] = [];
  const postgres = new PostgresProcesses(ctx.target.databaseUrl);
  const http = keepAliveAgent(4);
  const agentProfile = ctx.profileDir ? { dir: ctx.profileDir, name: 'embeddings-agent-0.cpuprofile' } : undefined;
  try {
    ctx.log(`embeddings: ${devices} fake runtimes (${ctx.opts.embedInputMs} ms an input, ${dimensions} dimensions)`);
    runtimes.push(...(await Promise.all(tokens.map((_, i) => Runtime.start(ctx, i)))));
    tokens.forEach((token, i) => {
      const models = i === 0 ? [ONE, ALL] : [ALL];
      const args = [
        ...['--server', stack.dispatcher.url, '--token', token, '--backend', 'openai'],
        ...['--upstream', runtimes[i].baseUrl, '--log-level', 'warn'],
        ...models.flatMap((m) => ['--model', `${m}=${RUNTIME_MODEL}`]),
      ];
      // Under --cpu-prof the first agent is profiled too: it is the device of the one-device leg.
      const profile = i === 0 ? agentProfile : undefined;
      agents.push(
        ctx.track(
          startNode(`embed-agent-${i}`, 'apps/device/src/main.js', args, { PATH: process.env.PATH }, { profile }),
        ),
      );
    });
    await waitOnline(ctx.target.redisUrl, ONE, 1, { procs: agents, timeoutMs: 60_000 });
    await waitOnline(ctx.target.redisUrl, ALL, devices, { procs: agents, timeoutMs: 60_000 });
    await postgres.connect();
    const redis = await redisPid(ctx.target.redisUrl);
    const groups: CpuGroup[] = [
      { name: 'api', pids: () => [stack.api.proc.pid] },
      { name: 'dispatcher', pids: () => [stack.dispatcher.proc.pid] },
      { name: 'agents', pids: () => agents.map((a) => a.pid) },
      { name: 'runtimes', pids: () => runtimes.map((r) => r.proc.pid) },
      { name: 'redis', pids: () => (redis ? [redis] : []) },
      postgres,
      { name: 'bench', pids: () => [process.pid] },
    ];

    const direct = new URL(`${runtimes[0].baseUrl}/embeddings`);
    const relayed = new URL(`${stack.api.url}/v1/embeddings`);
    const auth = { authorization: `Bearer ${ctx.apiKey}` };
    const body = (model: string, input: string[], format: Format) =>
      JSON.stringify({ model, input, encoding_format: format });

    /** One timed request of a leg; the answer is checked after the clock stopped. */
    const runOnce = async (leg: LegName, format: Format, tag: string): Promise<Run> => {
      const texts = inputTexts(inputs, tag);
      const before: CpuSample = await sampleCpu(groups);
      const machineBefore = machineCpuMs();
      const sentAt = epochNow();
      const started = performance.now();
      const answers: { body: string; inputs: string[]; status: number; error?: string }[] = [];
      if (leg === 'direct-batched') {
        for (const part of batchesOf(texts, batchMax) as string[][]) {
          const res = await postJson(direct, {}, body(RUNTIME_MODEL, part, format), http);
          answers.push({ ...res, inputs: part });
        }
      } else {
        const url = leg === 'direct' ? direct : relayed;
        const model = leg === 'direct' ? RUNTIME_MODEL : leg === 'relay-1' ? ONE : ALL;
        const res = await postJson(url, leg === 'direct' ? {} : auth, body(model, texts, format), http);
        answers.push({ ...res, inputs: texts });
      }
      const ms = performance.now() - started;
      const endAt = sentAt + ms;
      const after = await sampleCpu(groups);
      const machineAfter = machineCpuMs();
      const served = await Promise.all(runtimes.map((r) => r.log()));
      let ok = true;
      let problem: string | undefined;
      let promptTokens: number | null = 0;
      const taskAddresses: string[] = [];
      for (const a of answers) {
        const check =
          a.status === 200
            ? checkAnswer(a.body, a.inputs, dimensions)
            : {
                ok: false,
                problem: `HTTP ${a.status}: ${(a.error ?? a.body).slice(0, 300)}`,
                promptTokens: null,
                taskAddresses: [],
              };
        ok &&= check.ok;
        problem ??= check.problem;
        promptTokens = promptTokens === null || check.promptTokens === null ? null : promptTokens + check.promptTokens;
        taskAddresses.push(...check.taskAddresses);
      }
      // The devices' token counts, summed by the api over the batches: the runtime's count for the inputs.
      const expectedTokens = texts.reduce((n, t) => n + tokensOf(t), 0);
      if (ok && promptTokens !== expectedTokens) {
        ok = false;
        problem = `usage.prompt_tokens ${promptTokens}, the runtime counted ${expectedTokens}`;
      }
      return {
        ms,
        ok,
        problem,
        taskAddresses,
        sentAt,
        endAt,
        served,
        cpuMs: cpuDelta(before, after),
        machineBusyMs: machineAfter.busy - machineBefore.busy,
      };
    };

    const results = new Map<string, Run[]>();
    const key = (leg: LegName, format: Format) => `${leg}/${format}`;
    ctx.log(`embeddings: warm-up, one request of ${inputs} inputs per leg and encoding`);
    for (const format of FORMATS) {
      for (const leg of LEGS) {
        const run = await runOnce(leg, format, `warm-${leg}-${format}`);
        if (!run.ok) {
          throw new Error(`embeddings: the warm-up request of ${leg} (${format}) failed: ${run.problem}`);
        }
        await sleep(PAUSE_MS);
      }
    }
    ctx.markLoad('start');
    const measuredFrom = monotonicUs();
    for (let r = 0; r < runs; r++) {
      ctx.log(`embeddings: round ${r + 1} of ${runs} (${LEGS.join(', ')}; float and base64)`);
      for (const format of FORMATS) {
        for (const leg of LEGS) {
          const run = await runOnce(leg, format, `run${r}-${leg}-${format}`);
          results.set(key(leg, format), [...(results.get(key(leg, format)) ?? []), run]);
          await sleep(PAUSE_MS);
        }
      }
    }
    ctx.markLoad('end');
    const measured: Window = { startUs: measuredFrom, endUs: monotonicUs() };

    // Which device embedded each batch of the parallel leg: the task records.
    await recordsWritten(ctx.target.redisUrl);
    const relayRuns = FORMATS.flatMap((f) => results.get(key('relay-n', f)) ?? []);
    const oneRuns = FORMATS.flatMap((f) => results.get(key('relay-1', f)) ?? []);
    const addresses = [...relayRuns, ...oneRuns].flatMap((r) => r.taskAddresses);
    const tasks = await ctx.fixtures.db.task.findMany({
      where: { address: { in: addresses } },
      select: { address: true, deviceId: true, queuedAt: true, assignedAt: true, finishedAt: true },
    });
    const deviceOf = new Map(tasks.map((t) => [t.address, t.deviceId]));
    const times = new Map<string, TaskTimes>(
      tasks.map((t) => [
        t.address,
        {
          deviceId: t.deviceId,
          queuedAt: t.queuedAt.getTime(),
          assignedAt: t.assignedAt?.getTime() ?? null,
          finishedAt: t.finishedAt?.getTime() ?? null,
        },
      ]),
    );
    const paths = new Map<string, ReturnType<typeof pathStats>>();
    for (const format of FORMATS) {
      for (const leg of ['relay-1', 'relay-n'] as const) {
        const parts = (results.get(key(leg, format)) ?? []).map((r) => pathParts(r, deviceIds, times));
        paths.set(key(leg, format), pathStats(parts.filter((p): p is PathParts => p !== null)));
      }
    }
    const batchSizes = batchesOf(inputTexts(inputs, 'sizes'), batchMax).map((b) => b.length);
    const batchesPerDevice = deviceIds.map(() => 0);
    const inputsPerDevice = deviceIds.map(() => 0);
    const devicesPerRequest: number[] = [];
    for (const run of relayRuns) {
      const used = new Set<number>();
      run.taskAddresses.forEach((address, batch) => {
        const d = deviceIds.indexOf(deviceOf.get(address) ?? '');
        if (d >= 0) {
          used.add(d);
          batchesPerDevice[d]++;
          inputsPerDevice[d] += batchSizes[batch];
        }
      });
      devicesPerRequest.push(used.size);
    }
    const oneOnFirst = oneRuns.every((r) => r.taskAddresses.every((a) => deviceOf.get(a) === deviceIds[0]));
    const batchesPerRequest = median([...relayRuns, ...oneRuns].map((r) => r.taskAddresses.length));

    // The agent writes its profile when it exits.
    await Promise.all(agents.map((a) => a.stop(5_000)));
    const agentFile = agentProfile && join(agentProfile.dir, agentProfile.name);
    const agentSummary = agentFile && existsSync(agentFile) ? summarizeProfile(agentFile, ROOT, measured) : null;

    const stats = new Map<string, LegStats>();
    for (const format of FORMATS) {
      for (const leg of LEGS) {
        stats.set(key(leg, format), legStats(leg, format, results.get(key(leg, format)) ?? [], inputs));
      }
    }
    const get = (leg: LegName, format: Format) => stats.get(key(leg, format))!;
    const allRuns = [...results.values()].flat();
    const wrong = allRuns.filter((r) => !r.ok);
    const scaleGoal = SCALE_GOAL_SHARE * devices;
    const targets: TargetCheck[] = [];
    for (const format of FORMATS) {
      const d = get('direct', format);
      const one = get('relay-1', format);
      const ratio = one.inputsPerS / d.inputsPerS;
      targets.push({
        target: `Embeddings: inputs/s relayed ÷ direct, 1 device, ${inputs} inputs (${format})`,
        goal: `≥ ${RELAY_GOAL}`,
        measured: `${num(ratio, 2)} (${num(one.inputsPerS, 0)} against ${num(d.inputsPerS, 0)} inputs/s, medians of ${runs})`,
        pass: one.wrong === 0 && d.wrong === 0 ? ratio >= RELAY_GOAL : null,
      });
    }
    for (const format of FORMATS) {
      const one = get('relay-1', format);
      const n = get('relay-n', format);
      const ratio = n.inputsPerS / one.inputsPerS;
      targets.push({
        target: `Embeddings: inputs/s with ${devices} devices ÷ 1 device (${format})`,
        goal: `≥ ${num(scaleGoal, 1)}×`,
        measured: `${num(ratio, 2)}× (${num(n.inputsPerS, 0)} against ${num(one.inputsPerS, 0)} inputs/s)`,
        pass: one.wrong === 0 && n.wrong === 0 ? ratio >= scaleGoal : null,
      });
    }
    targets.push(
      {
        target: 'Embeddings: answers in input order, every vector equal to its input’s (bit for bit), usage counted',
        goal: `${allRuns.length} of ${allRuns.length}`,
        measured: `${allRuns.length - wrong.length} of ${allRuns.length}${wrong[0] ? ` (${wrong[0].problem})` : ''}`,
        pass: wrong.length === 0,
      },
      {
        target: `Embeddings: each of the ${devices} devices embeds a share of every ${devices}-device request`,
        goal: `${devices} devices in each of ${relayRuns.length} requests`,
        measured:
          `${devicesPerRequest.filter((n) => n === devices).length} of ${relayRuns.length} requests used all ` +
          `${devices} (fewest ${Math.min(...devicesPerRequest)}); batches per device ${batchesPerDevice.join(' / ')}`,
        pass: relayRuns.length > 0 && devicesPerRequest.every((n) => n === devices),
      },
    );
    for (const t of targets) {
      ctx.log(
        `embeddings: ${t.target}: ${t.measured} (goal ${t.goal}) ${t.pass === null ? 'n/a' : t.pass ? 'PASS' : 'MISS'}`,
      );
    }

    const legLabel: Record<LegName, string> = {
      direct: 'direct, one request',
      'direct-batched': `direct, batches of ${batchMax} one after another`,
      'relay-1': 'relayed, 1 device',
      'relay-n': `relayed, ${devices} devices`,
    };
    const ratioText = (s: LegStats) => {
      const base = s.leg === 'relay-n' ? get('relay-1', s.format) : get('direct', s.format);
      return s.leg === 'direct' ? '—' : `${num(s.inputsPerS / base.inputsPerS, 2)}${s.leg === 'relay-n' ? '×' : ''}`;
    };
    const ordered = FORMATS.flatMap((f) => LEGS.map((l) => get(l, f)));
    const table = [
      mdTable(
        [
          'leg',
          'encoding',
          'requests',
          'request time p50 / p90 (ms)',
          'inputs/s (median)',
          'ratio (to direct; n devices: to 1 device)',
          'answers right',
        ],
        ordered.map((s) => [
          legLabel[s.leg],
          s.format,
          String(s.runs),
          `${num(s.requestMs.p50, 0)} / ${num(s.requestMs.p90, 0)}`,
          num(s.inputsPerS, 0),
          ratioText(s),
          `${s.runs - s.wrong} of ${s.runs}`,
        ]),
        ['l', 'l', 'r', 'r', 'r', 'r', 'r'],
      ),
      mdTable(
        [
          'leg',
          'encoding',
          'request → first batch at a runtime (ms)',
          'busiest runtime computing / rendering (ms)',
          'between batches at a runtime p50 / p90 (ms) × per request',
          'last answer written → client has it (ms)',
          'runtimes busy',
        ],
        ordered.map((s) => [
          legLabel[s.leg],
          s.format,
          num(s.headMs, 1),
          `${num(s.computeMs, 0)} / ${num(s.renderMs, 0)}`,
          s.gapMs.n > 0 ? `${num(s.gapMs.p50, 1)} / ${num(s.gapMs.p90, 1)} × ${num(s.gapsPerRequest, 0)}` : '—',
          num(s.tailMs, 1),
          `${Math.round(s.busyShare * 100)} %`,
        ]),
        ['l', 'l', 'r', 'r', 'r', 'r', 'r'],
      ),
      mdTable(
        [
          'leg',
          'encoding',
          'request → batches queued (api)',
          'queued → first assigned',
          'assigned → at its runtime',
          'answer written → batch finished',
          'finished → the device’s next batch assigned',
          'last batch finished → client has the answer',
        ],
        FORMATS.flatMap((format) =>
          (['relay-1', 'relay-n'] as const).map((leg) => {
            const p = paths.get(key(leg, format))!;
            return [
              legLabel[leg],
              format,
              ...[p.intakeMs, p.queueMs, p.toRuntimeMs, p.toFinishedMs, p.toNextAssignMs, p.answerMs].map((v) =>
                num(v, 1),
              ),
            ];
          }),
        ),
        ['l', 'l', 'r', 'r', 'r', 'r', 'r', 'r'],
      ),
      mdTable(
        ['leg', 'encoding', ...CPU_COLUMNS],
        ordered.map((s) => [legLabel[s.leg], s.format, ...CPU_COLUMNS.map((g) => num(s.cpuPer1000[g], 0))]),
        ['l', 'l', ...CPU_COLUMNS.map((): 'r' => 'r')],
      ),
    ].join('\n\n');
    const shareText = deviceIds
      .map((_, i) => `device ${i}: ${batchesPerDevice[i]} batches, ${inputsPerDevice[i]} inputs`)
      .join('; ');
    return {
      name: 'embeddings',
      title: `Embeddings: ${inputs} inputs in one request, direct and relayed`,
      table,
      notes: [
        `Fake runtimes (bench/lib/upstream.ts, a process each): vLLM's /v1/embeddings, ${ctx.opts.embedInputMs} ms of GPU ` +
          `time per input, one request at a time per runtime (a request waits for those before it), deterministic ` +
          `float32 vectors of ${dimensions} dimensions at unit length; \`float\` as JSON numbers printed in full (as ` +
          `Python prints float32 values widened to doubles), \`base64\` as little-endian float32. ${inputs} distinct inputs ` +
          `of about 30 tokens per request (120 characters).`,
        `Direct: the request straight to the first device's runtime, in one request (the baseline of the goal: what the ` +
          `client would send without Switchyard) and as the api's batches of EMBED_BATCH_MAX = ${batchMax} one after ` +
          `another (what one runtime serving the batches costs without the relay). Relayed: \`POST /v1/embeddings\` to the ` +
          `api (${batchesPerRequest} batches a request), switchyard-device processes \`--backend openai\` each in front of its ` +
          `own runtime; the agent asks its runtime for \`base64\` whatever the client asked (the api writes floats for a ` +
          `client that wants them). Models: ${ONE} served by device 0 only, ${ALL} by all ${devices}, ` +
          `so that the legs alternate request by request (${runs} rounds after a warm-up round, ${PAUSE_MS} ms apart).`,
        `Request time: request written → whole answer read by the bench's client (the check of every vector comes after). ` +
          `Inputs/s at the median request time. The second table is from the runtimes' own log of each request they ` +
          `served (arrived, GPU start and end, answer written; epoch clock of this machine): "between batches" is a ` +
          `runtime's answer written → its next batch arrived, what the path between two batches costs.`,
        `Batches of the ${devices}-device requests (task records): ${shareText}. The 1-device requests ran on device 0 ` +
          `${oneOnFirst ? 'only' : 'and others (unexpected)'}.`,
        'Third table: the relayed path from the task records (queued, assigned, finished: the ' +
          'api’s and the dispatcher’s clocks, millisecond precision) beside the runtimes’ log, medians over requests ' +
          '(per-batch columns over every batch); a device’s batches are matched with its runtime’s requests in order.',
        ...(agentSummary
          ? [
              `Device 0's agent under --cpu-prof (\`${agentSummary.file}\`, the measured rounds): ` +
                `${num(agentSummary.busyMs / 1000, 1)} s busy of ${num(agentSummary.totalMs / 1000, 1)} s; top self time: ` +
                agentSummary.top
                  .slice(0, 8)
                  .map((f) => `\`${f.frame}\` ${num(f.percent, 1)} %`)
                  .join(', ') +
                '; by origin: ' +
                agentSummary.byOrigin
                  .slice(0, 6)
                  .map((o) => `${o.origin} ${num(o.percent, 1)} %`)
                  .join(', ') +
                '.',
            ]
          : []),
        'Fourth table: CPU ms per 1,000 inputs per process group (/proc, over each timed request, summed); relay = api + ' +
          'dispatcher + redis + postgres; other = the rest of the machine (its other users; the machine is shared). ' +
          'Everything shares the same cores: the runtimes’ rendering and the agents’ parsing, which in production run ' +
          'on the devices’ own machines, compete here with the relay.',
      ],
      targets,
      data: {
        inputs,
        runs,
        devices,
        dimensions,
        embed_input_ms: ctx.opts.embedInputMs,
        embed_batch_max: batchMax,
        batches_per_request: batchesPerRequest,
        legs: Object.fromEntries(
          ordered.map((s) => [
            key(s.leg, s.format),
            {
              runs: s.runs,
              wrong: s.wrong,
              ...(s.firstProblem ? { first_problem: s.firstProblem } : {}),
              request_ms: rounded(s.requestMs),
              inputs_per_s: round(s.inputsPerS),
              head_ms: round(s.headMs),
              compute_ms: round(s.computeMs),
              render_ms: round(s.renderMs),
              gap_ms: rounded(s.gapMs),
              gaps_per_request: s.gapsPerRequest,
              tail_ms: round(s.tailMs),
              runtimes_busy: round(s.busyShare),
              cpu_ms_per_1000_inputs: Object.fromEntries(Object.entries(s.cpuPer1000).map(([k, v]) => [k, round(v)])),
            },
          ]),
        ),
        relayed_path_ms: Object.fromEntries(
          [...paths.entries()].map(([k, p]) => [
            k,
            Object.fromEntries(Object.entries(p).map(([name, v]) => [name, round(v)])),
          ]),
        ),
        batches_per_device: batchesPerDevice,
        inputs_per_device: inputsPerDevice,
        devices_per_request: devicesPerRequest,
        one_device_runs_on_device_0: oneOnFirst,
        ...(agentSummary ? { agent_0_profile: { ...agentSummary, byOrigin: agentSummary.byOrigin.slice(0, 12) } } : {}),
      },
    };
  } finally {
    http.destroy();
    await postgres.close();
    await Promise.all(agents.map((a) => a.stop(5_000)));
    await Promise.all(runtimes.map((r) => r.stop()));
  }
}
