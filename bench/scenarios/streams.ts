import { performance } from 'node:perf_hooks';
import { getTimed, keepAliveAgent, streamChat } from '../lib/client';
import type { StreamHandle } from '../lib/client';
import type { Ctx, ScenarioResult, Stack, TargetCheck } from '../lib/context';
import { KB } from '../lib/context';
import { Fleet } from '../lib/fleet';
import { kb, mdTable, num } from '../lib/format';
import { closedLoop } from '../lib/load';
import { scrape } from '../lib/metrics';
import { rssBytes } from '../lib/procfs';
import { collectGarbage, sleep, waitOnline } from '../lib/stack';
import { median, rounded, summarize } from '../lib/stats';

const MODEL = 'bench-streams';
/** The bound on api memory per open stream. */
const PER_STREAM_LIMIT = 64 * KB;
/** Slow replies: one token a second, long enough to outlast the ramp and the hold. */
const TOKENS_PER_SECOND = 1;
const REPLY_TOKENS = 300;
/** Streams are opened at this rate, not all in one instant (that is the fan-in scenario's storm). */
const OPEN_RATE_PER_S = 250;
/** The hold starts once every stream has its first token, or after this long with those that have. */
const RAMP_LIMIT_MS = 45_000;
const HEALTH_SAMPLE_MS = 100;
const mbNum = (bytes: number | null) =>
  bytes === null || !Number.isFinite(bytes) ? '—' : (bytes / 2 ** 20).toFixed(1);
const RSS_SAMPLE_MS = 500;

export async function streamsScenario(ctx: Ctx, stack: Stack): Promise<ScenarioResult> {
  const { opts } = ctx;
  const count = opts.streams;
  await ctx.fixtures.enableModel(MODEL);
  const tokens = await ctx.fixtures.devices(count, 'streams');
  const fleet = Fleet.spawn('streams-fleet');
  ctx.track(fleet.proc);
  const handles: StreamHandle[] = [];
  try {
    const started = fleet.next('started');
    fleet.send({
      type: 'start',
      mode: 'agents',
      server: stack.dispatcher.url,
      tokens,
      args: [
        ...['--backend', 'sim', '--model', MODEL, '--log-level', 'warn', '--sim-ttft-ms', '100'],
        ...['--sim-tokens-per-second', String(TOKENS_PER_SECOND), '--sim-tokens', String(REPLY_TOKENS)],
      ],
    });
    await started;
    ctx.log(`streams: ${count} sim agents in one process connecting`);
    await waitOnline(ctx.target.redisUrl, MODEL, count, { procs: [fleet.proc] });

    const agent = keepAliveAgent(count + 64);
    const url = new URL(`${stack.api.url}/v1/chat/completions`);
    const headers = { authorization: `Bearer ${ctx.apiKey}` };
    const request = (maxTokens: number) =>
      JSON.stringify({
        model: MODEL,
        messages: [{ role: 'user', content: 'Take your time.' }],
        stream: true,
        max_tokens: maxTokens,
      });

    ctx.log(`streams: warm-up ${opts.warmupS}s of short streams`);
    await closedLoop({
      concurrency: Math.min(count, 64),
      durationMs: opts.warmupS * 1000,
      run: async () => void (await streamChat(url, headers, request(2), agent).done),
    });
    await sleep(1_500);

    const apiPid = stack.api.proc.pid;
    const dispatcherPid = stack.dispatcher.proc.pid;
    const healthAgent = keepAliveAgent(4);
    const sampleHealth = async (ms: number) => {
      const api: number[] = [];
      const dispatcher: number[] = [];
      const end = performance.now() + ms;
      while (performance.now() < end) {
        const [a, d] = await Promise.all([
          getTimed(new URL(`${stack.api.url}/healthz`), healthAgent),
          getTimed(new URL(`${stack.dispatcher.url}/healthz`), healthAgent),
        ]);
        api.push(a.ms);
        dispatcher.push(d.ms);
        await sleep(HEALTH_SAMPLE_MS);
      }
      return { api: summarize(api), dispatcher: summarize(dispatcher) };
    };
    const idleHealth = await sampleHealth(2_000);
    await collectGarbage(stack.api.proc, stack.dispatcher.proc);
    const baseline = {
      apiRss: rssBytes(apiPid),
      dispatcherRss: rssBytes(dispatcherPid),
      health: idleHealth,
      apiMetrics: await scrape(stack.api.url),
      dispatcherMetrics: await scrape(stack.dispatcher.url),
    };

    ctx.log(`streams: opening ${count} slow streams (${TOKENS_PER_SECOND} token/s) at ${OPEN_RATE_PER_S}/s`);
    let open = 0;
    let openEnded = 0;
    ctx.markLoad('start');
    const results = handles;
    const rampStart = performance.now();
    for (let i = 0; i < count; i++) {
      const due = rampStart + (i * 1000) / OPEN_RATE_PER_S;
      const wait = due - performance.now();
      if (wait > 1) {
        await sleep(wait);
      }
      let opened = false;
      const handle = streamChat(url, headers, request(REPLY_TOKENS), agent, (n) => {
        if (n === 1) {
          opened = true;
          open++;
        }
      });
      void handle.done.then(() => {
        if (opened) {
          openEnded++;
        }
      });
      results.push(handle);
    }
    const rampDeadline = performance.now() + RAMP_LIMIT_MS;
    while (open < count && performance.now() < rampDeadline) {
      await sleep(100);
    }
    const rampMs = performance.now() - rampStart;
    ctx.log(`streams: ${open}/${count} streams open after ${num(rampMs / 1000, 1)} s; holding ${opts.durationS}s`);

    await scrape(stack.api.url);
    await scrape(stack.dispatcher.url);
    const apiRss: number[] = [];
    const dispatcherRss: number[] = [];
    const sampler = setInterval(() => {
      apiRss.push(rssBytes(apiPid) ?? Number.NaN);
      dispatcherRss.push(rssBytes(dispatcherPid) ?? Number.NaN);
    }, RSS_SAMPLE_MS);
    const openAtHold = open;
    const loaded = await sampleHealth(opts.durationS * 1000);
    clearInterval(sampler);
    const apiMetrics = await scrape(stack.api.url);
    const dispatcherMetrics = await scrape(stack.dispatcher.url);
    const endedEarly = openEnded;
    const openAtEnd = open - endedEarly;
    // Live memory with the streams still open: after a full collection, as the baseline was read.
    await collectGarbage(stack.api.proc, stack.dispatcher.proc);
    const held = {
      apiRss: rssBytes(apiPid),
      dispatcherRss: rssBytes(dispatcherPid),
      apiHeap: (await scrape(stack.api.url))?.heapUsed ?? null,
      dispatcherHeap: (await scrape(stack.dispatcher.url))?.heapUsed ?? null,
    };
    ctx.markLoad('end');

    for (const h of handles) {
      h.abort();
    }
    const ended = await Promise.all(handles.map((h) => h.done));
    const failed = ended.filter((r) => r.error && r.error !== 'aborted');
    agent.destroy();
    healthAgent.destroy();

    const apiPlateau = median(apiRss);
    const dispatcherPlateau = median(dispatcherRss);
    const perStream = (after: number | null, before: number | null | undefined) =>
      after !== null && before !== null && before !== undefined
        ? (after - before) / Math.max(1, openAtEnd)
        : Number.NaN;
    const apiPerStream = perStream(held.apiRss, baseline.apiRss);
    const dispatcherPerStream = perStream(held.dispatcherRss, baseline.dispatcherRss);
    const heapPerStream = perStream(held.apiHeap, baseline.apiMetrics?.heapUsed);
    const dispatcherHeapPerStream = perStream(held.dispatcherHeap, baseline.dispatcherMetrics?.heapUsed);
    const measured = [apiPerStream, heapPerStream].filter((v) => Number.isFinite(v));
    const worstPerStream = measured.length ? Math.max(...measured) : null;
    const lagText = (m: typeof apiMetrics) =>
      m ? `${num(m.lagP50)} / ${num(m.lagP99)} / ${num(m.lagMax)}` : 'not exposed';

    const table = mdTable(
      [
        'open streams',
        'api RSS before / during / held (MB)',
        'api per stream: RSS / heap',
        'dispatcher RSS before / during / held (MB)',
        'dispatcher per stream: RSS / heap',
        'api event-loop delay p50/p99/max (ms, /metrics)',
        'dispatcher event-loop delay p50/p99/max (ms, /metrics)',
        'GET /healthz api p50/p99 (ms) idle → loaded',
        'GET /healthz dispatcher p50/p99 (ms) idle → loaded',
      ],
      [
        [
          `${openAtEnd}/${count}`,
          `${mbNum(baseline.apiRss)} / ${mbNum(apiPlateau)} / ${mbNum(held.apiRss)}`,
          `${kb(apiPerStream)} / ${kb(heapPerStream)}`,
          `${mbNum(baseline.dispatcherRss)} / ${mbNum(dispatcherPlateau)} / ${mbNum(held.dispatcherRss)}`,
          `${kb(dispatcherPerStream)} / ${kb(dispatcherHeapPerStream)}`,
          lagText(apiMetrics),
          lagText(dispatcherMetrics),
          `${num(baseline.health.api.p50)}/${num(baseline.health.api.p99)} → ${num(loaded.api.p50)}/${num(loaded.api.p99)}`,
          `${num(baseline.health.dispatcher.p50)}/${num(baseline.health.dispatcher.p99)} → ${num(loaded.dispatcher.p50)}/${num(loaded.dispatcher.p99)}`,
        ],
      ],
    );
    const targets: TargetCheck[] = [
      {
        target: `Open streams: api memory per open stream (${openAtEnd} streams)`,
        goal: '≤ 64 KB',
        measured: `RSS ${kb(apiPerStream)}, V8 heap ${kb(heapPerStream)}`,
        // The larger of the two: RSS moves in whole pages and V8 returns some after a collection, so it can
        // hide what the heap shows. Judged at the size only: with a few streams, noise outweighs them.
        pass: worstPerStream !== null && openAtEnd >= 1000 ? worstPerStream <= PER_STREAM_LIMIT : null,
      },
    ];
    return {
      name: 'streams',
      title: `Open streams (${count} concurrent slow streams)`,
      table,
      notes: [
        `${count} sim devices (DeviceAgent instances in one process, built from the \`switchyard-device\` arguments) replying at ${TOKENS_PER_SECOND} token/s; streams opened at ` +
          `${OPEN_RATE_PER_S}/s and held ${opts.durationS} s once every one had its first token or ${RAMP_LIMIT_MS / 1000} s had passed ` +
          `(${openAtHold} of ${count} open after ${num(rampMs / 1000, 1)} s).`,
        'Memory per stream = (memory held at the end of the hold − memory before, after a warm-up) / open streams, ' +
          'both read right after a full garbage collection (SIGUSR2 to a preload, bench/lib/gc-signal.ts); RSS from /proc, ' +
          'V8 heap in use from the process\'s /metrics; "during" is the median RSS over the hold, garbage included.',
        "Event-loop delay comes from the process's own /metrics (prom-client's monitorEventLoopDelay, reset at each scrape) where it has one; " +
          "/healthz latency is measured from the bench process, so it includes the bench's own event loop.",
        ...(failed.length ? [`${failed.length} streams failed; first: ${failed[0].error}`] : []),
        ...(endedEarly > 0 ? [`${endedEarly} open streams ended before the memory was read.`] : []),
      ],
      targets,
      data: {
        streams: count,
        open_at_hold: openAtHold,
        ramp_ms: Math.round(rampMs),
        failed: failed.length,
        open_at_end: openAtEnd,
        api_rss_bytes: { before: baseline.apiRss, during_median: apiPlateau, held_after_gc: held.apiRss },
        dispatcher_rss_bytes: {
          before: baseline.dispatcherRss,
          during_median: dispatcherPlateau,
          held_after_gc: held.dispatcherRss,
        },
        api_heap_used_bytes: { before: baseline.apiMetrics?.heapUsed ?? null, held_after_gc: held.apiHeap },
        dispatcher_heap_used_bytes: {
          before: baseline.dispatcherMetrics?.heapUsed ?? null,
          held_after_gc: held.dispatcherHeap,
        },
        per_stream_bytes: {
          api_rss: Math.round(apiPerStream),
          api_heap: Math.round(heapPerStream),
          dispatcher_rss: Math.round(dispatcherPerStream),
          dispatcher_heap: Math.round(dispatcherHeapPerStream),
        },
        api_event_loop_ms: apiMetrics,
        dispatcher_event_loop_ms: dispatcherMetrics,
        healthz_ms: {
          idle: { api: rounded(baseline.health.api), dispatcher: rounded(baseline.health.dispatcher) },
          loaded: { api: rounded(loaded.api), dispatcher: rounded(loaded.dispatcher) },
        },
      },
    };
  } finally {
    for (const h of handles) {
      h.abort();
    }
    await fleet.stop();
  }
}
