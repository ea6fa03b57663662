import { spawn } from 'node:child_process';
import http from 'node:http';
import { performance } from 'node:perf_hooks';
import { createRedis } from '@app/common';
import type { FloodCommand, FloodReport, FloodStats, StormMode, StormStats } from '../flood-worker';
import { keepAliveAgent, postJson } from '../lib/client';
import type { Ctx, ScenarioResult, Stack, TargetCheck } from '../lib/context';
import { MB } from '../lib/context';
import { Fleet } from '../lib/fleet';
import { IpcWorker } from '../lib/ipc-worker';
import { mdTable, num } from '../lib/format';
import { openLoop } from '../lib/load';
import { cpuDelta, machineCpuMs, sampleCpu } from '../lib/procfs';
import type { CpuGroup, CpuSample } from '../lib/procfs';
import { redisPid } from '../lib/services';
import { Proc, nodeArgs, recordsWritten, sleep, waitOnline } from '../lib/stack';
import { round, rounded, summarize } from '../lib/stats';
import type { Summary } from '../lib/stats';

/** Org B's own model, served by its own (direct) sim agents: what the flood must not slow down. */
const VICTIM_MODEL = 'bench-hostile-own';
/**
 * Org B's devices. At 20 requests/s and a few ms of service each, one device would already keep up;
 * four keep org B's requests from ever waiting for a device, so that its latency is the relay's.
 */
const VICTIM_DEVICES = 4;
/** Idle devices with zero generation time (as throughput's): the latency is all relay, the most sensitive to it. */
const SIM_ARGS = ['--sim-ttft-ms', '0', '--sim-tokens-per-second', '0', '--sim-tokens', '4'];
/**
 * Org B's offered load, open loop: a steady tenant, far below what the stack serves (throughput holds
 * p99 under 250 ms at hundreds per second), so that any change in its latency is the flood's doing.
 * 20/s gives 200 samples in the quiet window and 400 in the flood one.
 */
const VICTIM_RATE = 20;
/**
 * The windows: 10 s quiet, then 20 s of flood. 20 s at 4 MiB/s is 80 MiB that an unbounded relay would
 * put through Redis; the new relay strikes the device out after DEVICE_MAX_INVALID_EVENTS (20) flooded
 * tasks and refuses it for 10 s, so 20 s also holds a reconnect after its cooling-off.
 */
const QUIET_S = { full: 10, quick: 2 };
const FLOOD_S = { full: 20, quick: 4 };

/** Org A's model, served only by the hostile network device. */
const FLOOD_MODEL = 'bench-flood';
/** As the review's device: 100 KB deltas (under DEVICE_MAX_EVENT_BYTES, 256 KiB, so each is a valid event). */
const DELTA_CHARS = 100_000;
/** The dispatcher's default DEVICE_MAX_BYTES_PER_SECOND (the bench starts it with no override): the device's full budget. */
const DEVICE_BYTES_PER_SECOND = 4 * 1024 * 1024;
/**
 * The share of that budget the device sends at. The dispatcher's bucket refills continuously and holds
 * one second's worth, so pacing at exactly the budget would already pass; the 2 % left covers the
 * announce and done packets, which count against the same budget, and timer rounding.
 */
const BUDGET_SHARE = 0.98;
/** The review's request: 5 tokens allowed. */
const FLOOD_MAX_TOKENS = 5;
/**
 * After a refused request (a 503: no device online for the model), org A's client waits this long
 * before the next: a client looping on 503s thousands of times a second would be another attack than
 * this one.
 */
const PAUSE_AFTER_REFUSAL_MS = 100;
/** The attacker's CPU priority, as test/hostile's Flood: its own CPU is on its machine, not ours. */
const FLOOD_NICE = 10;

/** Redis's used_memory is read this often: a flooded task's stream grows by 400 KB per 100 ms. */
const SAMPLE_MS = 100;
/**
 * How long org A's last request may take to end once the device stopped: time for a stream that lags
 * behind the device to be read to its end. A request still waiting then is in the queue (the device
 * was refused for a cooling-off when the window ended, and nothing else serves the model): the client
 * goes away, as a real one would.
 */
const SETTLE_TIMEOUT_MS = 5_000;
const ABORTED = 'still waiting at the end: client went away';
/** Redis is read again this long after the flood settled: what the flood left behind. */
const AFTER_MS = 2_000;

/**
 * The goals. Redis may grow by 64 MB: the fixed relay lets through about 22 KB per max_tokens-5 task,
 * so a few MB is already generous, and the rest is room for other users of the shared server; yet it
 * is below the 80 MiB an unbounded relay takes from one device in the 20 s window.
 */
const REDIS_GROWTH_LIMIT = 64 * MB;
/**
 * Org B's p99 during the flood may be twice its quiet p99 plus 20 ms: the p99 of 200 samples is their
 * second worst, and on a shared 2-core machine it moved between 15 and 36 ms from one quiet window to
 * the next with no flood at all. What it catches is interference of tens of ms, not of a few.
 */
const P99_FACTOR = 2;
const P99_SLACK_MS = 20;

/**
 * The protocol storm (issue 33: the floods of the hostile e2e suites, whose latency bounds were timing
 * assertions in a test and are measured here instead): hostile devices of their own, each as fast as its
 * socket takes it and reconnecting at once when dropped or refused (see bench/flood-worker.ts). The mix
 * of test/hostile/devices.e2e-spec.ts (two each of announce, big and junk), plus a storm of wrong tokens
 * as test/hostile/handshakes.e2e-spec.ts sends them.
 */
const STORM_DEVICES: readonly StormMode[] = ['handshake', 'announce', 'announce', 'big', 'big', 'junk', 'junk'];
const STORM_S = { full: 20, quick: 4 };
/** Made-up model names of the storm start with it: no key or metric label may carry it afterwards. */
const STORM_MARKER = 'bench-storm-junk';
/** Just under DEVICE_MAX_EVENT_BYTES (256 KiB): each `big` event is a valid frame, for a task the device does not hold. */
const STORM_BIG_BYTES = 256 * 1024 - 2_000;
/**
 * The goals during the storm, as the e2e suite had them: org B's median at most twice its quiet median
 * (and its p99 as in the output flood); the dispatcher's /healthz median, a few ms when quiet, under
 * 250 ms: bounded in absolute terms, not as a ratio of something that small.
 */
const MEDIAN_FACTOR = 2;
const HEALTHZ_MEDIAN_LIMIT_MS = 250;

interface VictimWindow {
  offered: number;
  completed: number;
  failures: number;
  failureCodes: Record<string, number>;
  latency: Summary;
}

/**
 * What another organization (the victim) must see during an attack, against its quiet window: a p99
 * within P99_FACTOR of its quiet one plus P99_SLACK_MS, no failed request and, where asked, a median
 * within MEDIAN_FACTOR of its quiet one.
 */
function victimTargets(
  attack: string,
  window: Pick<VictimWindow, 'latency' | 'failures'>,
  quiet: Pick<VictimWindow, 'latency'>,
  { median = false } = {},
): TargetCheck[] {
  const p99Goal = P99_FACTOR * quiet.latency.p99 + P99_SLACK_MS;
  const medianGoal = MEDIAN_FACTOR * quiet.latency.p50;
  const medianTarget: TargetCheck = {
    target: `Hostile: another organization's median during ${attack}`,
    goal: `≤ ${MEDIAN_FACTOR} × quiet median (${num(medianGoal)} ms)`,
    measured: `${num(window.latency.p50)} ms`,
    pass: window.latency.p50 <= medianGoal,
  };
  return [
    ...(median ? [medianTarget] : []),
    {
      target: `Hostile: another organization's p99 during ${attack}`,
      goal: `≤ ${P99_FACTOR} × quiet p99 + ${P99_SLACK_MS} ms (${num(p99Goal)} ms)`,
      measured: `${num(window.latency.p99)} ms`,
      pass: window.latency.p99 <= p99Goal,
    },
    {
      target: `Hostile: another organization's failed requests during ${attack}`,
      goal: '0',
      measured: String(window.failures),
      pass: window.failures === 0,
    },
  ];
}

interface RedisWindow {
  before: number;
  peak: number;
  after?: number;
}

interface AttackResult {
  requests: number;
  /** Characters of content org A's client received, over all its requests. */
  chars: number;
  /** How each request ended at the client: an error code, `finish_reason: …`, or `HTTP 503 …`. */
  endings: Record<string, number>;
}

/** The bench's side of the flood-worker process. */
class FloodDevice extends IpcWorker<FloodCommand, FloodReport> {
  /** Started as startNode starts a bench process, behind `nice`. */
  static spawn(name = 'flood-device'): FloodDevice {
    const args = ['-n', String(FLOOD_NICE), process.execPath, ...nodeArgs('bench/flood-worker.js', [])];
    return new FloodDevice(
      new Proc(
        name,
        spawn('nice', args, { env: { PATH: process.env.PATH }, stdio: ['ignore', 'pipe', 'pipe', 'ipc'] }),
      ),
    );
  }

  private storming = false;

  /** Starts a protocol storm (see StormMode) and resolves once its devices are on their way. */
  async storm(command: Extract<FloodCommand, { type: 'storm' }>): Promise<void> {
    this.storming = true;
    const storming = this.next('storming');
    this.send(command);
    await storming;
  }

  /** Stops a storm and returns what its devices did. */
  async stopStorm(): Promise<StormStats | null> {
    if (!this.proc.running || !this.storming) {
      await this.proc.stop(3_000);
      return null;
    }
    return this.stopWith(this.next('storm-stats', 10_000));
  }

  /** Stops the flood (the task in hand ends with done) and returns what the device did. */
  async stop(): Promise<FloodStats | null> {
    if (!this.proc.running) {
      return null;
    }
    return this.stopWith(this.next('stats', 10_000));
  }

  /** Tells the worker to stop, returns the stats of `reply` (awaited from before), and lets the process end. */
  private async stopWith<S>(reply: Promise<{ stats: S }>): Promise<S> {
    this.send({ type: 'stop' });
    try {
      return (await reply).stats;
    } finally {
      await Promise.race([this.proc.exited, sleep(3_000)]);
      await this.proc.stop(3_000);
    }
  }
}

/**
 * Org A's streamed request: reads the SSE answer to its end, counting the content's characters and
 * how it ended. Its own reader rather than streamChat's: it needs the error's code, and keeps no
 * timestamps (the review's client received 17 million characters).
 */
function floodRequest(
  url: URL,
  key: string,
  agent: http.Agent,
): { done: Promise<{ status: number; chars: number; ending: string }>; abort(): void } {
  const body = JSON.stringify({
    model: FLOOD_MODEL,
    messages: [{ role: 'user', content: 'flood me' }],
    stream: true,
    max_tokens: FLOOD_MAX_TOKENS,
  });
  let req: http.ClientRequest | undefined;
  let aborted = false;
  const done = new Promise<{ status: number; chars: number; ending: string }>((resolve) => {
    let status = 0;
    let chars = 0;
    let ending = 'no ending';
    req = http.request(
      url,
      {
        method: 'POST',
        agent,
        headers: {
          authorization: `Bearer ${key}`,
          'content-type': 'application/json',
          'content-length': String(Buffer.byteLength(body)),
        },
      },
      (res) => {
        status = res.statusCode ?? 0;
        res.setEncoding('utf8');
        let buffer = '';
        res.on('data', (chunk: string) => {
          buffer += chunk;
          if (status !== 200) {
            return;
          }
          let end: number;
          while ((end = buffer.indexOf('\n\n')) >= 0) {
            const event = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            if (!event.startsWith('data: ') || event === 'data: [DONE]') {
              continue;
            }
            try {
              const parsed = JSON.parse(event.slice(6)) as {
                choices?: { delta?: { content?: string }; finish_reason?: string | null }[];
                error?: { code?: string };
              };
              if (parsed.error) {
                ending = parsed.error.code ?? 'error event';
              }
              for (const choice of parsed.choices ?? []) {
                chars += choice.delta?.content?.length ?? 0;
                if (choice.finish_reason) {
                  ending = `finish_reason: ${choice.finish_reason}`;
                }
              }
            } catch {
              ending = 'unparseable event';
            }
          }
        });
        res.on('end', () => {
          if (status !== 200) {
            let code = '';
            try {
              code = (JSON.parse(buffer) as { error?: { code?: string } }).error?.code ?? '';
            } catch {
              // not JSON
            }
            ending = `HTTP ${status} ${code}`.trim();
          }
          resolve({ status, chars, ending });
        });
        res.on('error', () => resolve({ status, chars, ending: aborted ? ABORTED : 'connection lost' }));
      },
    );
    req.on('error', () => resolve({ status, chars, ending: aborted ? ABORTED : 'connection lost' }));
    req.end(body);
  });
  return {
    done,
    abort: () => {
      aborted = true;
      req?.destroy();
    },
  };
}

/** `12 device_output_exceeded, 3 HTTP 503 no_device_available`, most first. */
const countsText = (counts: Record<string, number>) =>
  Object.entries(counts)
    .sort((a, b) => b[1] - a[1])
    .map(([what, n]) => `${n} ${what}`)
    .join(', ') || 'none';

/**
 * The dispatcher's count of devices' invalid events by reason (switchyard_device_invalid_events_total,
 * in both the old and the new relay): `over_budget` says whether the flood kept to its budget.
 */
async function invalidEvents(
  dispatcherUrl: string,
  metric = 'switchyard_device_invalid_events_total',
): Promise<Record<string, number> | null> {
  try {
    const res = await fetch(`${dispatcherUrl}/metrics`);
    const text = await res.text();
    if (!res.ok) {
      return null;
    }
    const out: Record<string, number> = {};
    for (const m of text.matchAll(new RegExp(`^${metric}\\{[^}]*reason="([^"]+)"[^}]*\\} (\\d+)`, 'gm'))) {
      out[m[1]] = Number(m[2]);
    }
    return out;
  } catch {
    return null;
  }
}

/** What a count by reason grew by between two readings (null when either is unknown). */
function grown(before: Record<string, number> | null, after: Record<string, number> | null) {
  if (!before || !after) {
    return null;
  }
  const out: Record<string, number> = {};
  for (const [reason, n] of Object.entries(after)) {
    if (n - (before[reason] ?? 0) > 0) {
      out[reason] = n - (before[reason] ?? 0);
    }
  }
  return out;
}

/** How long each GET of the dispatcher's /healthz takes, one after the other for `durationMs`. */
async function healthWindow(
  dispatcherUrl: string,
  durationMs: number,
): Promise<{ latency: Summary; failures: number }> {
  const end = performance.now() + durationMs;
  const samples: number[] = [];
  let failures = 0;
  while (performance.now() < end) {
    const started = performance.now();
    try {
      const res = await fetch(`${dispatcherUrl}/healthz`, { signal: AbortSignal.timeout(10_000) });
      await res.arrayBuffer();
      if (!res.ok) {
        failures++;
      }
    } catch {
      failures++;
    }
    samples.push(performance.now() - started);
  }
  return { latency: summarize(samples), failures };
}

/** Keys whose name has `marker` in it (made-up names that must not reach Redis). */
async function keysWith(redis: ReturnType<typeof createRedis>, marker: string): Promise<number> {
  let found = 0;
  let cursor = '0';
  do {
    const [next, batch] = await redis.scan(cursor, 'MATCH', `*${marker}*`, 'COUNT', 1000);
    cursor = next;
    found += batch.length;
  } while (cursor !== '0');
  return found;
}

const mbText = (bytes: number | undefined) => (bytes === undefined ? '—' : num(bytes / MB, 1));

/**
 * Issue 31: one hostile network device floods every task it is given with 100 KB deltas at its full
 * byte budget, while another organization (B) uses its own model on its own devices. Measures org B's
 * latency and failures in a quiet window and then in a flood window, Redis's used_memory, what the
 * device sent and what org A's client received. It uses only what the relay had before the fix
 * (2db6aa6), so that the same scenario measures before and after. Then a third window: the protocol
 * storm of the hostile e2e suites (wrong tokens, announces of made-up models, events just under the
 * size limit for tasks not held, invalid events), with org B's latency and the dispatcher's /healthz.
 */
export async function hostileScenario(ctx: Ctx, stack: Stack): Promise<ScenarioResult> {
  const quietMs = (ctx.opts.quick ? QUIET_S.quick : QUIET_S.full) * 1000;
  const floodMs = (ctx.opts.quick ? FLOOD_S.quick : FLOOD_S.full) * 1000;
  const orgB = await ctx.fixtures.org('victim', 1, VICTIM_MODEL);
  const orgA = await ctx.fixtures.org('flooder', 1, FLOOD_MODEL);
  const victimTokens = await ctx.fixtures.devices(
    VICTIM_DEVICES,
    'hostile-victim',
    Array.from({ length: VICTIM_DEVICES }, () => orgB.orgId),
  );
  const [floodToken] = await ctx.fixtures.devices(1, 'hostile-flood');
  const stormTokens = await ctx.fixtures.devices(STORM_DEVICES.length, 'hostile-storm');
  const stormMs = (ctx.opts.quick ? STORM_S.quick : STORM_S.full) * 1000;

  const fleet = Fleet.spawn('hostile-victims');
  ctx.track(fleet.proc);
  const flood = FloodDevice.spawn();
  ctx.track(flood.proc);
  const stormer = FloodDevice.spawn('storm-devices');
  ctx.track(stormer.proc);
  const redis = createRedis(ctx.target.redisUrl);
  const samples: { at: number; bytes: number }[] = [];
  let sampler: NodeJS.Timeout | undefined;
  const victimAgent = keepAliveAgent(256);
  const attackerAgent = keepAliveAgent(1);
  try {
    const started = fleet.next('started');
    fleet.send({
      type: 'start',
      mode: 'agents',
      server: stack.dispatcher.url,
      tokens: victimTokens,
      args: ['--backend', 'sim', '--model', VICTIM_MODEL, '--log-level', 'warn', ...SIM_ARGS],
    });
    await started;
    await waitOnline(ctx.target.redisUrl, VICTIM_MODEL, VICTIM_DEVICES, { procs: [fleet.proc], pool: orgB.orgId });
    const ready = flood.next('ready');
    flood.send({
      type: 'start',
      server: stack.dispatcher.url,
      token: floodToken,
      model: FLOOD_MODEL,
      bytesPerSecond: DEVICE_BYTES_PER_SECOND * BUDGET_SHARE,
      deltaChars: DELTA_CHARS,
    });
    await ready;
    await waitOnline(ctx.target.redisUrl, FLOOD_MODEL, 1, { procs: [flood.proc] });
    ctx.log(`hostile: org B's ${VICTIM_DEVICES} direct sim agents and the flooding network device are online`);

    const memory = await redis.info('memory');
    const maxmemory = Number(/^maxmemory:(\d+)/m.exec(memory)?.[1] ?? 0);
    let sampling = false;
    sampler = setInterval(() => {
      if (sampling) {
        return;
      }
      sampling = true;
      void redis
        .info('memory')
        .then((info) => {
          const used = /^used_memory:(\d+)/m.exec(info);
          if (used) {
            samples.push({ at: performance.now(), bytes: Number(used[1]) });
          }
        })
        .catch(() => undefined)
        .finally(() => (sampling = false));
    }, SAMPLE_MS);
    const lastBefore = (t: number) => [...samples].reverse().find((s) => s.at <= t)?.bytes ?? samples[0]?.bytes ?? 0;
    const peakIn = (from: number, to: number) =>
      samples.filter((s) => s.at >= from && s.at <= to).reduce((m, s) => Math.max(m, s.bytes), 0);

    const redisServer = await redisPid(ctx.target.redisUrl);
    const groups: CpuGroup[] = [
      { name: 'api', pids: () => [stack.api.proc.pid] },
      { name: 'dispatcher', pids: () => [stack.dispatcher.proc.pid] },
      { name: 'redis', pids: () => (redisServer ? [redisServer] : []) },
      { name: "org B's agents", pids: () => [fleet.proc.pid] },
      { name: 'flood device', pids: () => [flood.proc.pid] },
      { name: 'storm devices', pids: () => [stormer.proc.pid] },
      { name: 'bench', pids: () => [process.pid] },
    ];
    const cpuWindow = async () => ({ at: performance.now(), cpu: await sampleCpu(groups), machine: machineCpuMs() });
    /** Each group's CPU as % of one core over a window, and the machine's busy share (all cores). */
    const cpuPercent = (a: { at: number; cpu: CpuSample; machine: { busy: number; total: number } }, b: typeof a) => {
      const wall = b.at - a.at;
      const out: Record<string, number> = {};
      for (const [name, ms] of Object.entries(cpuDelta(a.cpu, b.cpu))) {
        out[name] = (ms / wall) * 100;
      }
      out['machine busy'] = ((b.machine.busy - a.machine.busy) / (b.machine.total - a.machine.total)) * 100;
      return out;
    };
    const roundAll = (values: Record<string, number>) =>
      Object.fromEntries(Object.entries(values).map(([k, v]) => [k, round(v)]));

    const url = new URL(`${stack.api.url}/v1/chat/completions`);
    const victimHeaders = { authorization: `Bearer ${orgB.key}` };
    const victimBody = JSON.stringify({
      model: VICTIM_MODEL,
      messages: [{ role: 'user', content: 'ping' }],
      max_tokens: 4,
    });
    /** Org B's open loop for a window; a latency counts from when its request was due. */
    const victimWindow = async (durationMs: number): Promise<VictimWindow> => {
      const latencies: number[] = [];
      const failureCodes: Record<string, number> = {};
      let completed = 0;
      let closed = false;
      const result = await openLoop({
        rate: VICTIM_RATE,
        durationMs,
        maxInFlight: 1_000,
        fire: async (dueAt) => {
          const r = await postJson(url, victimHeaders, victimBody, victimAgent);
          if (closed) {
            return;
          }
          if (r.status === 200) {
            completed++;
            latencies.push(r.endAt - dueAt);
          } else {
            let code = r.error ?? '';
            try {
              code = (JSON.parse(r.body) as { error?: { code?: string } }).error?.code ?? code;
            } catch {
              // not JSON
            }
            const key = `HTTP ${r.status} ${code}`.trim();
            failureCodes[key] = (failureCodes[key] ?? 0) + 1;
          }
        },
      });
      closed = true;
      // Unanswered after the drain: failures, and their wait so far counts in the latency.
      const now = performance.now();
      latencies.push(...result.unfinished.map((due) => now - due));
      if (result.unfinished.length + result.skipped > 0) {
        failureCodes.unanswered = result.unfinished.length + result.skipped;
      }
      const failures = Object.values(failureCodes).reduce((a, b) => a + b, 0);
      return {
        offered: result.started + result.skipped,
        completed,
        failures,
        failureCodes,
        latency: summarize(latencies),
      };
    };

    ctx.log(`hostile: warm-up ${ctx.opts.warmupS}s of org B at ${VICTIM_RATE}/s`);
    await victimWindow(ctx.opts.warmupS * 1000);
    await sleep(500);

    ctx.markLoad('start');
    ctx.log(`hostile: quiet window, ${quietMs / 1000}s of org B at ${VICTIM_RATE}/s`);
    const quietCpu0 = await cpuWindow();
    const quietStart = performance.now();
    const [quiet, quietHealth] = await Promise.all([
      victimWindow(quietMs),
      healthWindow(stack.dispatcher.url, quietMs),
    ]);
    const quietEnd = performance.now();
    const quietCpu = cpuPercent(quietCpu0, await cpuWindow());
    const quietRedis: RedisWindow = { before: lastBefore(quietStart), peak: peakIn(quietStart, quietEnd) };

    ctx.log(`hostile: flood window, ${floodMs / 1000}s: org A streams max_tokens ${FLOOD_MAX_TOKENS} one at a time`);
    const floodCpu0 = await cpuWindow();
    const floodStart = performance.now();
    const floodEnd = floodStart + floodMs;
    const attack: AttackResult = { requests: 0, chars: 0, endings: {} };
    let inFlight: ReturnType<typeof floodRequest> | null = null;
    const attacker = (async () => {
      while (performance.now() < floodEnd) {
        inFlight = floodRequest(url, orgA.key, attackerAgent);
        const r = await inFlight.done;
        attack.requests++;
        attack.chars += r.chars;
        attack.endings[r.ending] = (attack.endings[r.ending] ?? 0) + 1;
        if (r.status !== 200) {
          await sleep(PAUSE_AFTER_REFUSAL_MS);
        }
      }
    })();
    const victimDuringFlood = victimWindow(floodMs);
    await sleep(Math.max(0, floodEnd - performance.now()));
    // Read before the flood process goes: the CPU of a process that exited cannot be read.
    const floodCpu = cpuPercent(floodCpu0, await cpuWindow());
    const device = await flood.stop();
    // The task in hand ended with done: its answer reaches org A's client once it has read what came before.
    const settled = await Promise.race([attacker.then(() => true), sleep(SETTLE_TIMEOUT_MS).then(() => false)]);
    if (!settled) {
      ctx.log(`hostile: org A's last request had not ended ${SETTLE_TIMEOUT_MS / 1000}s after the flood: it goes away`);
      (inFlight as ReturnType<typeof floodRequest> | null)?.abort();
      await attacker;
    }
    const flooded = await victimDuringFlood;
    const settledAt = performance.now();
    // Org B's devices are the sim agent, which sends nothing invalid: every count here is the flood's.
    const strikes = await invalidEvents(stack.dispatcher.url);
    ctx.markLoad('end');
    await sleep(AFTER_MS);
    const floodRedis: RedisWindow = {
      before: lastBefore(floodStart),
      peak: peakIn(floodStart, settledAt),
      after: lastBefore(performance.now()),
    };

    ctx.log(`hostile: protocol storm, ${stormMs / 1000}s: ${STORM_DEVICES.join(', ')}`);
    const invalidBefore = await invalidEvents(stack.dispatcher.url);
    const refusalsBefore = await invalidEvents(stack.dispatcher.url, 'switchyard_handshake_refusals_total');
    const stormCpu0 = await cpuWindow();
    const stormStart = performance.now();
    await stormer.storm({
      type: 'storm',
      server: stack.dispatcher.url,
      devices: STORM_DEVICES.map((mode, i) => ({ token: stormTokens[i], mode })),
      marker: STORM_MARKER,
      bigBytes: STORM_BIG_BYTES,
    });
    const [stormed, stormHealth] = await Promise.all([
      victimWindow(stormMs),
      healthWindow(stack.dispatcher.url, stormMs),
    ]);
    // Read before the storm process goes (as for the flood).
    const stormCpu = cpuPercent(stormCpu0, await cpuWindow());
    const storm = await stormer.stopStorm();
    const stormEnd = performance.now();
    const stormInvalid = grown(invalidBefore, await invalidEvents(stack.dispatcher.url));
    const stormRefusals = grown(
      refusalsBefore,
      await invalidEvents(stack.dispatcher.url, 'switchyard_handshake_refusals_total'),
    );
    const stormRedis: RedisWindow = { before: lastBefore(stormStart), peak: peakIn(stormStart, stormEnd) };
    const stormKeys = await keysWith(redis, STORM_MARKER);
    clearInterval(sampler);
    sampler = undefined;

    await recordsWritten(ctx.target.redisUrl);
    const records = await ctx.fixtures.db.task.findMany({
      where: { modelId: FLOOD_MODEL },
      select: { status: true, errorCode: true, outputBytes: true },
    });
    const recordEndings: Record<string, number> = {};
    for (const r of records) {
      const key = r.errorCode ? `${r.status} (${r.errorCode})` : r.status;
      recordEndings[key] = (recordEndings[key] ?? 0) + 1;
    }
    const relayedBytes = records.reduce((n, r) => n + Number(r.outputBytes ?? 0), 0);

    const table = mdTable(
      [
        'window',
        'org B requests',
        'org B p50 / p99 (ms)',
        'org B failures',
        'Redis used_memory before / peak (MB)',
        'flood device sent',
        'org A received (chars)',
        'flooded tasks: how they ended',
      ],
      [
        [
          `quiet (${quietMs / 1000} s)`,
          String(quiet.offered),
          `${num(quiet.latency.p50)} / ${num(quiet.latency.p99)}`,
          String(quiet.failures),
          `${mbText(quietRedis.before)} / ${mbText(quietRedis.peak)}`,
          '—',
          '—',
          '—',
        ],
        [
          `flood (${floodMs / 1000} s)`,
          String(flooded.offered),
          `${num(flooded.latency.p50)} / ${num(flooded.latency.p99)}`,
          String(flooded.failures),
          `${mbText(floodRedis.before)} / ${mbText(floodRedis.peak)}`,
          device ? `${num(device.wireBytes / MB, 1)} MB in ${device.deltas} deltas` : '—',
          attack.chars.toLocaleString('en-US'),
          `${records.length}: ${countsText(recordEndings)}`,
        ],
        [
          `protocol storm (${stormMs / 1000} s)`,
          String(stormed.offered),
          `${num(stormed.latency.p50)} / ${num(stormed.latency.p99)}`,
          String(stormed.failures),
          `${mbText(stormRedis.before)} / ${mbText(stormRedis.peak)}`,
          storm
            ? `${storm.events.toLocaleString('en-US')} events, ${num(storm.bytes / MB, 0)} MB, ` +
              `${storm.connects + Object.values(storm.refusals).reduce((a, b) => a + b, 0)} handshakes`
            : '—',
          '—',
          '—',
        ],
      ],
      ['l', 'r', 'r', 'r', 'r', 'r', 'r', 'l'],
    );
    const cpuNames = [...groups.map((g) => g.name), 'machine busy'];
    const cpuTable = mdTable(
      ['CPU, % of one core', ...cpuNames],
      [
        ['quiet', ...cpuNames.map((n) => `${num(quietCpu[n], 0)} %`)],
        ['flood', ...cpuNames.map((n) => `${num(floodCpu[n], 0)} %`)],
        ['protocol storm', ...cpuNames.map((n) => `${num(stormCpu[n], 0)} %`)],
      ],
      ['l', ...cpuNames.map((): 'r' => 'r')],
    );

    const growth = floodRedis.peak - floodRedis.before;
    const targets: TargetCheck[] = [
      {
        target: 'Hostile: Redis used_memory while one device floods at its full byte budget',
        goal: `peak ≤ before + ${REDIS_GROWTH_LIMIT / MB} MB`,
        measured: `+${num(growth / MB, 1)} MB`,
        pass: growth <= REDIS_GROWTH_LIMIT,
      },
      ...victimTargets('the flood', flooded, quiet),
      ...victimTargets('the protocol storm', stormed, quiet, { median: true }),
      {
        target: "Hostile: the dispatcher's /healthz median during the protocol storm",
        goal: `< ${HEALTHZ_MEDIAN_LIMIT_MS} ms`,
        measured: `${num(stormHealth.latency.p50, 1)} ms`,
        pass: stormHealth.failures === 0 && stormHealth.latency.p50 < HEALTHZ_MEDIAN_LIMIT_MS,
      },
    ];
    const overBudget = strikes?.over_budget ?? 0;
    const strikesText = !strikes
      ? 'unknown (its /metrics did not answer)'
      : Object.keys(strikes).length === 0
        ? 'none, so none over_budget: the pace kept to the budget'
        : overBudget
          ? `${countsText(strikes)}: the pace went over the budget`
          : `${countsText(strikes)}, none of them over_budget: the pace kept to the budget`;
    const deviceLine = device
      ? `The flooding device got ${device.assigned} task:assign and sent ${device.deltas} deltas, ${num(device.wireBytes / MB, 1)} MB on the wire, ` +
        `the most for one task ${num(device.maxTaskWireBytes / MB, 2)} MB. Its floods ended: ${device.cancelled} by task:cancel, ` +
        `${device.lostWithConnection} with its connection, ${device.endedAtStop} by the end of the window (task:done). ` +
        `Connections ${device.connects}, lost ${countsText(device.disconnects)}, handshakes refused ${countsText(device.refusals)}. ` +
        `Invalid events the dispatcher counted (switchyard_device_invalid_events_total): ${strikesText}.`
      : 'The flooding device had exited before the end of the window.';
    return {
      name: 'hostile',
      title: 'Hostile device: an output flood at the full byte budget, and another organization (issue 31)',
      table: [table, '', cpuTable].join('\n'),
      notes: [
        `Org B: ${VICTIM_DEVICES} direct sim devices of its own (${SIM_ARGS.join(' ')}) serving its own model; non-streamed requests (max_tokens 4) at ${VICTIM_RATE}/s, open loop (latency from when each was due), ${ctx.opts.warmupS} s of warm-up, then the quiet window, the flood window and the protocol storm window. Failures: ${countsText(quiet.failureCodes)} quiet, ${countsText(flooded.failureCodes)} during the flood, ${countsText(stormed.failureCodes)} during the storm.`,
        `The flood: one network device of model \`${FLOOD_MODEL}\` (enabled for org A only; \`bench/flood-worker.ts\`, socket.io-client, a process of its own under \`nice -n ${FLOOD_NICE}\`) accepts every task and answers it with ${DELTA_CHARS / 1000} KB deltas paced at ${num(BUDGET_SHARE * 100, 0)} % of the default DEVICE_MAX_BYTES_PER_SECOND (4 MiB/s), so that none is dropped as over budget, until task:cancel or the end of the window. Org A's client keeps one streamed request (max_tokens ${FLOOD_MAX_TOKENS}) in flight, reads each to its end, and waits ${PAUSE_AFTER_REFUSAL_MS} ms after a refused one.`,
        deviceLine,
        `How org A's requests (${attack.requests}) ended: ${countsText(attack.endings)}; the task records say the relay passed on ${num(relayedBytes / MB, 2)} MB of output for them.`,
        `Redis: used_memory (INFO memory, server-wide: other users of the same redis-server count too) every ${SAMPLE_MS} ms; "before" is the last sample before the window, the flood's peak runs until org A's last stream ended; ${AFTER_MS / 1000} s later it was ${mbText(floodRedis.after)} MB. maxmemory ${maxmemory ? `${num(maxmemory / MB, 0)} MB` : 'not set'}.`,
        `The protocol storm: ${STORM_DEVICES.length} hostile devices of their own (\`bench/flood-worker.ts\` \`storm\`, socket.io-client, under \`nice -n ${FLOOD_NICE}\`), as the hostile e2e suites run them: ${STORM_DEVICES.join(', ')} (wrong tokens from a loopback address of their own; announces of 64 made-up names; ${num(STORM_BIG_BYTES / 1024, 0)} KiB deltas for a task not held; invalid events), each reconnecting at once when dropped or refused. ` +
          (storm
            ? `They made ${storm.connects} connections and were refused ${countsText(storm.refusals)}; lost ${storm.disconnects} connections; sent ${storm.events.toLocaleString('en-US')} events; were assigned ${storm.assigned} tasks. `
            : 'The storm process had exited before the end of the window. ') +
          `The dispatcher counted invalid events ${countsText(stormInvalid ?? {})} and refused handshakes ${countsText(stormRefusals ?? {})}; ${stormKeys} Redis keys carry a made-up name afterwards. ` +
          `Its /healthz, asked one request after another alongside org B's load: median ${num(quietHealth.latency.p50, 1)} ms quiet, ${num(stormHealth.latency.p50, 1)} ms during the storm (p99 ${num(quietHealth.latency.p99, 1)} → ${num(stormHealth.latency.p99, 1)} ms, ${stormHealth.failures} failed).`,
        `Goals: Redis may grow by at most ${REDIS_GROWTH_LIMIT / MB} MB (the fixed relay's bound for max_tokens 5 is about 22 KB per task; the margin is for the shared server and BullMQ's own keys, and stays under the ${num((DEVICE_BYTES_PER_SECOND * (floodMs / 1000)) / MB, 0)} MB the device can send in the window); org B's p99 at most ${P99_FACTOR} × its quiet p99 + ${P99_SLACK_MS} ms (a p99 of 200–400 samples moves by that much between runs on a busy 2-core machine); no org B request fails.`,
      ],
      targets,
      data: {
        settings: {
          victimRate: VICTIM_RATE,
          victimDevices: VICTIM_DEVICES,
          quietS: quietMs / 1000,
          floodS: floodMs / 1000,
          deltaChars: DELTA_CHARS,
          deviceBytesPerSecond: DEVICE_BYTES_PER_SECOND,
          floodMaxTokens: FLOOD_MAX_TOKENS,
          maxmemory,
        },
        quiet: {
          victim: { ...quiet, latency: rounded(quiet.latency) },
          redisMB: { before: round(quietRedis.before / MB), peak: round(quietRedis.peak / MB) },
          cpuPercent: roundAll(quietCpu),
        },
        flood: {
          victim: { ...flooded, latency: rounded(flooded.latency) },
          redisMB: {
            before: round(floodRedis.before / MB),
            peak: round(floodRedis.peak / MB),
            after: round((floodRedis.after ?? 0) / MB),
          },
          cpuPercent: roundAll(floodCpu),
          attacker: attack,
          device,
          invalidEvents: strikes,
          records: { count: records.length, endings: recordEndings, relayedBytes },
        },
        storm: {
          settings: { devices: STORM_DEVICES, stormS: stormMs / 1000, bigBytes: STORM_BIG_BYTES },
          victim: { ...stormed, latency: rounded(stormed.latency) },
          healthzMs: { quiet: rounded(quietHealth.latency), storm: rounded(stormHealth.latency) },
          healthzFailures: { quiet: quietHealth.failures, storm: stormHealth.failures },
          redisMB: { before: round(stormRedis.before / MB), peak: round(stormRedis.peak / MB) },
          cpuPercent: roundAll(stormCpu),
          devices: storm,
          invalidEvents: stormInvalid,
          handshakeRefusals: stormRefusals,
          keysWithMadeUpNames: stormKeys,
        },
        // The most used_memory in each second from the quiet window on, MB.
        redisPerSecondMB: perSecondPeaks(samples, quietStart),
      },
    };
  } finally {
    if (sampler) {
      clearInterval(sampler);
    }
    victimAgent.destroy();
    attackerAgent.destroy();
    redis.disconnect();
    await Promise.all([fleet.stop(), flood.stop().catch(() => null), stormer.stopStorm().catch(() => null)]);
    await Promise.all([flood.proc.stop(3_000), stormer.proc.stop(3_000)]);
  }
}

/** The highest sample of each second from `from` on, in MB with one decimal. */
function perSecondPeaks(samples: { at: number; bytes: number }[], from: number): number[] {
  const out: number[] = [];
  for (const s of samples) {
    if (s.at < from) {
      continue;
    }
    const i = Math.floor((s.at - from) / 1000);
    out[i] = Math.max(out[i] ?? 0, Math.round((s.bytes / MB) * 10) / 10);
  }
  return Array.from(out, (v) => v ?? 0);
}
