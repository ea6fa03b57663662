import { AssignLoad } from '../lib/assign-load';
import { keepAliveAgent } from '../lib/client';
import type { Ctx, ScenarioResult, Stack, TargetCheck } from '../lib/context';
import { cpuLine, measureCpu } from '../lib/cpu-window';
import type { CpuWindow } from '../lib/cpu-window';
import { FleetGroup, fleetWorkersFor } from '../lib/fleet';
import { mb, mdTable, num } from '../lib/format';
import { scrape } from '../lib/metrics';
import { rssBytes } from '../lib/procfs';
import type { CpuGroup } from '../lib/procfs';
import { clientsText, mostClients, redisClientsOf } from '../lib/redis-clients';
import type { RedisClients } from '../lib/redis-clients';
import { PostgresProcesses, redisPid } from '../lib/services';
import { collectGarbage, sleep, waitOnline } from '../lib/stack';
import { rounded, summarize } from '../lib/stats';

/** Issue 14: a dispatcher's Redis connections are a constant, the same with 1 queue or 2,000. */
const MAX_CONNECTIONS = 12;
const TARGET_QUEUES = 2_000;
/** Organizations set up at once (each a handful of statements). */
const SETUP_CONCURRENCY = 8;
/** How often the dispatcher's connections and memory are sampled under load. */
const SAMPLE_MS = 500;
/** Devices of the first organization: its one queue can take the whole load alone. */
const SINGLE_QUEUE_DEVICES = 10;

const directModel = (i: number) => `bench-q-direct-${i}`;
const networkModel = (i: number) => `bench-q-net-${i}`;

interface Phase {
  queues: number;
  devices: number;
  /** The dispatcher's Redis connections: the most seen in any sample under load. */
  clients: RedisClients;
  rssPeak: number;
  /** After the load and a full collection: resident memory, and V8 heap in use. */
  rssAfter: number | null;
  heapAfter: number | null;
  completedPerS: number;
  errors: number;
  firstError?: string;
  e2a: ReturnType<typeof summarize>;
  completion: ReturnType<typeof summarize>;
  cpu: CpuWindow;
}

/**
 * Issue 14: many queues on one dispatcher. `--queues` queues: half are direct, one per organization
 * (each with its own device serving a model of its own), half network, one per model (each model
 * served by a network device of its own, and enabled for one organization). One dispatcher first
 * serves a single queue (the first organization's, its device connected, requests at the same rate),
 * then every queue, with the requests spread over all of them (each line is used once in the
 * warm-up, so that both api and dispatcher have every line open); meanwhile its Redis connections
 * are counted exactly (its sockets to Redis, from /proc, matched against CLIENT LIST) and its memory
 * read.
 */
export async function queuesScenario(ctx: Ctx, stack: Stack): Promise<ScenarioResult> {
  const { opts } = ctx;
  const orgs = Math.max(1, Math.floor(opts.queues / 2));
  const queues = orgs * 2;
  const dispatcherPid = stack.dispatcher.proc.pid;

  ctx.log(`queues: ${orgs} organizations, each with a direct model and device, and ${orgs} network models`);
  const tenants: { orgId: string; key: string }[] = new Array<{ orgId: string; key: string }>(orgs);
  let nextOrg = 0;
  await Promise.all(
    Array.from({ length: SETUP_CONCURRENCY }, async () => {
      for (let i = nextOrg++; i < orgs; i = nextOrg++) {
        tenants[i] = await ctx.fixtures.org(`q${i}`, 1, [directModel(i), networkModel(i)]);
      }
    }),
  );
  const directTokens = await ctx.fixtures.devices(
    orgs,
    'queues-direct',
    tenants.map((t) => t.orgId),
  );
  const singleTokens = [
    directTokens[0],
    ...(await ctx.fixtures.devices(
      SINGLE_QUEUE_DEVICES - 1,
      'queues-single',
      tenants.slice(0, 1).flatMap((t) => Array<string>(SINGLE_QUEUE_DEVICES - 1).fill(t.orgId)),
    )),
  ];
  const networkTokens = await ctx.fixtures.devices(orgs, 'queues-network');

  const agent = keepAliveAgent(1024);
  const url = new URL(`${stack.api.url}/v1/chat/completions`);
  /** The n-th request of the org `org`, to its direct or its network model. */
  const request = (org: number, direct: boolean) => ({
    headers: { authorization: `Bearer ${tenants[org].key}` },
    body: JSON.stringify({
      model: direct ? directModel(org) : networkModel(org),
      messages: [{ role: 'user', content: 'ping' }],
      max_tokens: 4,
    }),
  });
  const postgres = new PostgresProcesses(ctx.target.databaseUrl);
  await postgres.connect();
  const redis = await redisPid(ctx.target.redisUrl);
  const fleets: FleetGroup[] = [];
  const groups: CpuGroup[] = [
    { name: 'api', pids: () => [stack.api.proc.pid] },
    { name: 'dispatcher', pids: () => [dispatcherPid] },
    { name: 'devices', pids: () => fleets.flatMap((f) => f.procs.map((p) => p.pid)) },
    postgres,
    { name: 'redis', pids: () => (redis ? [redis] : []) },
    { name: 'bench', pids: () => [process.pid] },
  ];

  /** A measured run: the dispatcher's connections and memory sampled throughout. */
  const measure = async (load: AssignLoad, label: string, used: number, devices: number): Promise<Phase> => {
    const samples: RedisClients[] = [await redisClientsOf(dispatcherPid, ctx.target.redisUrl)];
    let rssPeak = rssBytes(dispatcherPid) ?? 0;
    let sampling = Promise.resolve();
    const sampler = setInterval(() => {
      rssPeak = Math.max(rssPeak, rssBytes(dispatcherPid) ?? 0);
      sampling = sampling.then(async () => {
        samples.push(await redisClientsOf(dispatcherPid, ctx.target.redisUrl));
      });
    }, SAMPLE_MS);
    ctx.log(`queues: ${opts.queuesRate} requests/s for ${opts.durationS}s across ${label}`);
    const { result: run, cpu } = await measureCpu(groups, () => load.run(opts.queuesRate, opts.durationS * 1000, true));
    clearInterval(sampler);
    await sampling;
    samples.push(await redisClientsOf(dispatcherPid, ctx.target.redisUrl));
    const completed = load.close(run);
    ctx.log(`queues: CPU under load across ${label}: ${cpuLine(cpu)}`);
    await collectGarbage(stack.dispatcher.proc);
    const rssAfter = rssBytes(dispatcherPid);
    const heapAfter = (await scrape(stack.dispatcher.url))?.heapUsed ?? null;
    const assigns = new Map((await Promise.all(fleets.map((f) => f.collectAssigns()))).flat());
    const { enqueueToAssign } = await load.assignTimes(ctx.fixtures.db, ctx.target.redisUrl, assigns);
    const phase: Phase = {
      queues: used,
      devices,
      clients: mostClients(samples),
      rssPeak,
      rssAfter,
      heapAfter,
      completedPerS: (completed * 1000) / run.elapsedMs,
      errors: load.errors + run.skipped + run.unfinished.length,
      firstError: load.firstError,
      e2a: summarize(enqueueToAssign),
      completion: summarize(load.latencies),
      cpu,
    };
    ctx.log(
      `queues: ${label}: dispatcher Redis connections ${clientsText(phase.clients)}, RSS peak ${mb(rssPeak)}, ` +
        `enqueue→task:assign p50 ${num(phase.e2a.p50)} ms, p99 ${num(phase.e2a.p99)} ms`,
    );
    return phase;
  };

  try {
    // One queue: the first organization's direct model, its devices alone.
    const single = FleetGroup.spawn('queues-single', 1, SINGLE_QUEUE_DEVICES);
    fleets.push(single);
    single.procs.forEach((p) => ctx.track(p));
    await single.connectProbes(stack.dispatcher.url, singleTokens, [directModel(0)]);
    await waitOnline(ctx.target.redisUrl, directModel(0), SINGLE_QUEUE_DEVICES, {
      procs: single.procs,
      pool: tenants[0].orgId,
    });
    const singleLoad = new AssignLoad(url, agent, () => request(0, true));
    await singleLoad.run(opts.queuesRate, opts.warmupS * 1000, false);
    await sleep(500);
    await single.collectAssigns();
    const one = await measure(singleLoad, '1 queue', 1, SINGLE_QUEUE_DEVICES);

    // Every queue: the other organizations' devices and the network devices.
    const more = queues - 1;
    const all = FleetGroup.spawn('queues-fleet', opts.fleetWorkers ?? fleetWorkersFor(more), more);
    fleets.push(all);
    all.procs.forEach((p) => ctx.track(p));
    ctx.log(`queues: connecting ${more} more devices`);
    const report = await all.connectProbes(
      stack.dispatcher.url,
      [...directTokens.slice(1), ...networkTokens],
      [
        ...Array.from({ length: orgs - 1 }, (_, i) => [directModel(i + 1)]),
        ...Array.from({ length: orgs }, (_, i) => [networkModel(i)]),
      ],
    );
    if (report.failed > 0) {
      throw new Error(`${report.failed} devices did not connect: ${JSON.stringify(report.connectErrors)}`);
    }
    await waitOnline(ctx.target.redisUrl, networkModel(orgs - 1), 1, { procs: all.procs });
    await sleep(1_000);
    // Request n goes to org n mod orgs, direct in the first round of the orgs, network in the next.
    const spread = (n: number) => request(n % orgs, Math.floor(n / orgs) % 2 === 0);
    const spreadLoad = new AssignLoad(url, agent, spread);
    ctx.log(`queues: warm-up, one request to each of the ${queues} queues at ${opts.queuesRate}/s`);
    await spreadLoad.run(opts.queuesRate, (queues * 1000) / opts.queuesRate, false);
    await sleep(500);
    await Promise.all(fleets.map((f) => f.collectAssigns()));
    const many = await measure(spreadLoad, `${queues} queues`, queues, more + SINGLE_QUEUE_DEVICES);
    agent.destroy();

    const api = await redisClientsOf(stack.api.proc.pid, ctx.target.redisUrl);
    const table = mdTable(
      [
        'queues (lines)',
        'devices',
        'dispatcher Redis connections (most seen under load)',
        'dispatcher RSS peak / after (GC)',
        'dispatcher V8 heap after (GC)',
        'load (req/s)',
        'enqueue→task:assign p50/p90/p99 (ms)',
        'completion p50/p99 (ms)',
        'errors + unfinished',
      ],
      [one, many].map((p) => [
        `${p.queues} (${p.queues})`,
        String(p.devices),
        clientsText(p.clients),
        `${mb(p.rssPeak)} / ${mb(p.rssAfter)}`,
        mb(p.heapAfter),
        `${opts.queuesRate} offered, ${num(p.completedPerS)} done`,
        `${num(p.e2a.p50)} / ${num(p.e2a.p90)} / ${num(p.e2a.p99)}`,
        `${num(p.completion.p50)} / ${num(p.completion.p99)}`,
        String(p.errors),
      ]),
    );
    const constant = one.clients.count === many.clients.count;
    const targets: TargetCheck[] = [
      {
        target: `Queues: dispatcher Redis connections, 1 queue and ${queues} queues`,
        goal: `≤ ${MAX_CONNECTIONS}, the same`,
        measured: `${one.clients.count} and ${many.clients.count}`,
        pass:
          queues >= TARGET_QUEUES
            ? one.clients.count <= MAX_CONNECTIONS && many.clients.count <= MAX_CONNECTIONS && constant
            : null,
      },
    ];
    const firstError = many.firstError ?? one.firstError;
    return {
      name: 'queues',
      title: `Queues (${queues} queues on one dispatcher)`,
      table,
      notes: [
        `${orgs} organizations, each with an API key, a direct model of its own and a device of its own serving it (the ` +
          `first ${SINGLE_QUEUE_DEVICES}, so that its queue alone can take the load of the first run; a ` +
          `direct queue each), and ${orgs} network models, each served by a network device of its own and enabled for one ` +
          'organization (a network queue each): one line per queue. Devices are probes on bare sockets (as in fan-in).',
        `The same dispatcher first serves one queue (the first organization's, ${opts.queuesRate} requests/s), then ` +
          `every queue: a warm-up sends one request to each, then ${opts.queuesRate} requests/s go round the queues.`,
        `CPU (% of one core) under load, 1 queue: ${cpuLine(one.cpu)}; ${queues} queues: ${cpuLine(many.cpu)}.`,
        'Redis connections are counted exactly: the sockets the dispatcher process holds to Redis (/proc/<pid>/fd and ' +
          '/proc/net/tcp) matched by local port against CLIENT LIST, sampled every 0.5 s under load; the names are the ' +
          `connections' CLIENT SETNAME. The api, for comparison: ${clientsText(api)}.`,
        ...(firstError ? [`First error: ${firstError}`] : []),
      ],
      targets,
      data: {
        organizations: orgs,
        queues,
        rate: opts.queuesRate,
        api_redis_clients: api,
        phases: [one, many].map((p) => ({
          queues: p.queues,
          devices: p.devices,
          dispatcher_redis_clients: p.clients,
          dispatcher_rss_peak_bytes: p.rssPeak,
          dispatcher_rss_after_gc_bytes: p.rssAfter,
          dispatcher_heap_used_after_gc_bytes: p.heapAfter,
          completed_per_s: Math.round(p.completedPerS * 10) / 10,
          errors: p.errors,
          enqueue_to_assign_ms: rounded(p.e2a),
          completion_ms: rounded(p.completion),
          cpu_percent: p.cpu,
          ...(p.firstError ? { first_error: p.firstError } : {}),
        })),
      },
    };
  } finally {
    await postgres.close();
    await Promise.all(fleets.map((f) => f.stop()));
  }
}
