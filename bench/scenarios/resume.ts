import { performance } from 'node:perf_hooks';
import { KeySpace, TASK_FIELDS, createRedis, sha256Hex } from '@app/common';
import { keepAliveAgent, streamChat } from '../lib/client';
import type { StreamResult } from '../lib/client';
import type { Ctx, ScenarioResult, Stack, TargetCheck } from '../lib/context';
import { mdTable, num } from '../lib/format';
import { ADMIN_TOKEN, baseEnv, recordsWritten, sleep, startNode, waitOnline } from '../lib/stack';
import type { Proc } from '../lib/stack';
import { percentile, rounded, summarize } from '../lib/stats';

const MODEL = 'bench-resume';
/** Three devices: one killed, one to continue, one spare (the chaos phase kills one while two serve). */
const DEVICES = 3;
/** 60 pieces at 40 a second: 1.5 s per answer, long enough to kill a device in the middle of one. */
const SIM_ARGS = ['--sim-ttft-ms', '0', '--sim-tokens-per-second', '40', '--sim-tokens', '60'];
/** The device holding a request is SIGKILLed when its client has this many content events. */
const KILL_AT = 10;
/** Issue 37: kill → next token at the client, p50, with an idle device available. */
const GAP_GOAL_MS = 1_000;
const GAP_REQUESTS = { full: 30, quick: 6 };
/** The chaos run: streamed requests, two at a time, one device SIGKILLed (and restarted) every few seconds. */
const CHAOS_REQUESTS = { full: 100, quick: 20 };
const CHAOS_CLIENTS = 2;
const CHAOS_KILL_EVERY_MS = 3_000;
const BODY = JSON.stringify({
  model: MODEL,
  stream: true,
  messages: [{ role: 'user', content: 'tell me about the relay' }],
});

interface Device {
  token: string;
  id: string;
  proc: Proc | null;
}

/**
 * Resume (issue 37): a device SIGKILLed in the middle of an answer, and another continuing it. Real
 * agent processes on the sim (deterministic: a resumed answer must equal the uninterrupted one). The
 * gap is measured at the client: from the kill to the first token of the device that continued (the
 * index of that token is the first segment's length, from the task's record). Then a chaos run: every
 * request streamed while a device is killed and restarted every few seconds.
 */
export async function resumeScenario(ctx: Ctx, stack: Stack): Promise<ScenarioResult> {
  const quick = ctx.opts.quick;
  await ctx.fixtures.enableModel(MODEL);
  const tokens = await ctx.fixtures.devices(DEVICES, 'resume');
  const rows = await ctx.fixtures.db.device.findMany({ where: { tokenHash: { in: tokens.map(sha256Hex) } } });
  const devices: Device[] = tokens.map((token) => ({
    token,
    id: rows.find((r) => r.tokenHash === sha256Hex(token))!.id,
    proc: null,
  }));
  const start = (d: Device) => {
    const args = ['--server', stack.dispatcher.url, '--token', d.token, '--backend', 'sim', '--model', MODEL];
    d.proc = ctx.track(
      startNode(
        `resume-device-${d.id.slice(0, 4)}`,
        'apps/device/src/main.js',
        [...args, ...SIM_ARGS],
        baseEnv(ctx.target),
      ),
    );
  };
  const kill = (d: Device) => {
    d.proc?.child.kill('SIGKILL');
    d.proc = null;
  };
  devices.forEach(start);
  const redis = createRedis(ctx.target.redisUrl);
  const keys = KeySpace.of(redis);
  const agent = keepAliveAgent(8);
  const url = new URL(`${stack.api.url}/v1/chat/completions`);
  const headers = { authorization: `Bearer ${ctx.apiKey}` };
  const online = () => waitOnline(ctx.target.redisUrl, MODEL, DEVICES, { procs: devices.flatMap((d) => d.proc ?? []) });
  const holderOf = async (address: string) => {
    const id = await redis.hget(keys.taskState(address.slice(address.indexOf(':') + 1)), TASK_FIELDS.deviceId);
    return devices.find((d) => d.id === id) ?? null;
  };
  try {
    await online();
    const reference = await streamChat(url, headers, BODY, agent, undefined, true).done;
    if (!reference.complete) {
      throw new Error(`the reference request failed: ${reference.error}`);
    }
    const tokenGaps: number[] = [];
    for (let i = 1; i < reference.contentAt.length; i++) {
      tokenGaps.push(reference.contentAt[i] - reference.contentAt[i - 1]);
    }

    // Phase 1: one request at a time, its device killed at KILL_AT; the gap is kill → the next device's first token.
    const gaps: number[] = [];
    let gapWhole = 0;
    const gapRequests = quick ? GAP_REQUESTS.quick : GAP_REQUESTS.full;
    ctx.log(`resume: ${gapRequests} streams, each device SIGKILLed after ${KILL_AT} tokens`);
    for (let i = 0; i < gapRequests; i++) {
      let killedAt = 0;
      let killed: Device | null = null;
      const stream = streamChat(
        url,
        headers,
        BODY,
        agent,
        (count, address) => {
          if (count === KILL_AT && address) {
            void holderOf(address).then((d) => {
              if (d) {
                killedAt = performance.now();
                killed = d;
                kill(d);
              }
            });
          }
        },
        true,
      );
      const result = await stream.done;
      if (result.complete && result.text === reference.text) {
        gapWhole++;
      }
      const first = await firstSegmentTokens(stack.api.url, result);
      if (killed && first !== null && result.contentAt.length > first) {
        gaps.push(result.contentAt[first] - killedAt);
      }
      if (killed) {
        start(killed);
      }
      await online();
    }

    // Phase 2: chaos.
    const chaosRequests = quick ? CHAOS_REQUESTS.quick : CHAOS_REQUESTS.full;
    ctx.log(
      `resume: chaos, ${chaosRequests} streams, a device SIGKILLed and restarted every ${CHAOS_KILL_EVERY_MS} ms`,
    );
    let next = 0;
    let stopKilling = false;
    const results: StreamResult[] = [];
    const client = async () => {
      while (next < chaosRequests) {
        next++;
        results.push(await streamChat(url, headers, BODY, agent, undefined, true).done);
      }
    };
    let kills = 0;
    const killer = (async () => {
      while (!stopKilling) {
        await sleep(CHAOS_KILL_EVERY_MS);
        if (stopKilling) {
          break;
        }
        const victim = devices[kills % DEVICES];
        kills++;
        kill(victim);
        start(victim);
      }
    })();
    const chaosStart = performance.now();
    await Promise.all(Array.from({ length: CHAOS_CLIENTS }, client));
    const chaosS = (performance.now() - chaosStart) / 1000;
    stopKilling = true;
    await killer;
    const chaosWhole = results.filter((r) => r.complete && r.text === reference.text).length;
    const errors = new Map<string, number>();
    for (const r of results.filter((x) => !x.complete)) {
      errors.set(r.error ?? 'incomplete', (errors.get(r.error ?? 'incomplete') ?? 0) + 1);
    }
    await recordsWritten(ctx.target.redisUrl);
    const addresses = results.flatMap((r) => (r.taskAddress ? [r.taskAddress] : []));
    const records = await ctx.fixtures.db.task.findMany({ where: { address: { in: addresses } } });
    const resumed = records.filter((r) => r.resumes > 0).length;
    const resumes = records.reduce((n, r) => n + r.resumes, 0);

    const gap = summarize(gaps);
    const tokenGap = summarize(tokenGaps);
    const p50 = gaps.length > 0 ? percentile(gaps, 50) : null;
    const targets: TargetCheck[] = [
      {
        target: 'Resume: a device SIGKILLed mid-stream → the next token at the client, p50 (an idle device available)',
        goal: `≤ ${GAP_GOAL_MS} ms`,
        measured: `${num(p50, 0)} ms (p99 ${num(gaps.length ? percentile(gaps, 99) : null, 0)} ms; a token every ${num(tokenGap.p50, 0)} ms otherwise)`,
        pass: p50 === null ? null : p50 <= GAP_GOAL_MS,
      },
      {
        target: `Resume: chaos, ${DEVICES} devices, one SIGKILLed every ${CHAOS_KILL_EVERY_MS / 1000} s: streams whole`,
        goal: `${chaosRequests} of ${chaosRequests}, 0 client-visible errors`,
        measured: `${chaosWhole} of ${results.length} whole, ${results.length - chaosWhole} not (${resumed} resumed, ${resumes} resumes, ${kills} kills)`,
        pass: chaosWhole === chaosRequests,
      },
    ];
    const table = mdTable(
      ['measure', 'value'],
      [
        [
          'kill → next token at the client, p50 / p90 / p99 / max (ms)',
          `${num(gap.p50, 0)} / ${num(gap.p90, 0)} / ${num(gap.p99, 0)} / ${num(gap.max, 0)}`,
        ],
        [
          'the same streams, token → token p50 / p99 (ms, no failure)',
          `${num(tokenGap.p50, 1)} / ${num(tokenGap.p99, 1)}`,
        ],
        [
          'gap phase: streams resumed whole, equal to the uninterrupted answer',
          `${gapWhole} of ${gapRequests} (${gaps.length} gaps measured)`,
        ],
        [
          `chaos: streams whole (${CHAOS_CLIENTS} at a time, ${num(chaosS, 0)} s)`,
          `${chaosWhole} of ${results.length}`,
        ],
        ['chaos: tasks resumed / resumes / devices killed', `${resumed} / ${resumes} / ${kills}`],
        ['chaos: client-visible errors', errors.size ? JSON.stringify(Object.fromEntries(errors)) : '0'],
      ],
      ['l', 'r'],
    );
    return {
      name: 'resume',
      title: 'Resume: a stream survives its device',
      table,
      notes: [
        `${DEVICES} switchyard-device processes on the sim (${SIM_ARGS.join(' ')}), one api, one dispatcher. ` +
          `Gap: ${gapRequests} streams one at a time; the device holding each is SIGKILLed after ${KILL_AT} tokens reached ` +
          'the client and restarted after the answer; the gap ends at the first token of the device that continued ' +
          '(its index is the first segment\u2019s length in the task\u2019s record), so tokens already on their way from the ' +
          'killed device do not shorten it.',
        `Chaos: ${chaosRequests} streams, ${CHAOS_CLIENTS} at a time, while one device after another is SIGKILLed and ` +
          `restarted every ${CHAOS_KILL_EVERY_MS / 1000} s. Whole = ended with [DONE] and equal to the uninterrupted answer.`,
      ],
      targets,
      data: {
        gap_ms: rounded(gap),
        token_gap_ms: rounded(tokenGap),
        gap_whole: gapWhole,
        gap_requests: gapRequests,
        chaos: {
          requests: results.length,
          whole: chaosWhole,
          resumed,
          resumes,
          kills,
          errors: Object.fromEntries(errors),
        },
      },
    };
  } finally {
    redis.disconnect();
    agent.destroy();
    await Promise.all(devices.map((d) => d.proc?.stop(2_000) ?? Promise.resolve()));
  }
}

/** How many tokens the first device of a resumed task produced (null when the task was not resumed). */
async function firstSegmentTokens(apiUrl: string, result: StreamResult): Promise<number | null> {
  if (!result.taskAddress) {
    return null;
  }
  for (let tries = 0; tries < 50; tries++) {
    const res = await fetch(`${apiUrl}/admin/tasks/${result.taskAddress}`, {
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    if (res.ok) {
      const task = (await res.json()) as { segments: { tokens: number }[] | null; status: string };
      if (task.segments) {
        return task.segments[0].tokens;
      }
    }
    await sleep(100);
  }
  return null;
}
