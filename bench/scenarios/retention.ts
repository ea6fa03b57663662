import { createHash } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { isDeepStrictEqual } from 'node:util';
import pg from 'pg';
import type { PoolClient } from 'pg';
import pino from 'pino';
import { KeySpace, RETENTION_BATCH, createRedis, loadConfig } from '@app/common';
import type { PrismaService, RedisClient } from '@app/common';
import { RetentionService } from '../../apps/api/src/usage/retention.service';
import { keepAliveAgent } from '../lib/client';
import { ZERO_TIME_SIM_ARGS, completionWindow, failedIn, legTotals, legTotalsData } from '../lib/completion-window';
import type { LegTotals, MeasuredWindow } from '../lib/completion-window';
import type { Ctx, ScenarioResult, TargetCheck } from '../lib/context';
import { Fleet } from '../lib/fleet';
import { mdTable, num } from '../lib/format';
import { cpuDelta, machineCpuMs, sampleCpu } from '../lib/procfs';
import type { CpuGroup } from '../lib/procfs';
import { PostgresProcesses, redisPid } from '../lib/services';
import {
  ADMIN_TOKEN,
  DIST,
  Fixtures,
  ROOT,
  recordsWritten,
  resetDatabase,
  resetRedis,
  sleep,
  startApi,
  startDispatcher,
  waitOnline,
} from '../lib/stack';
import type { BenchTarget, Service } from '../lib/stack';
import { median, percentile, rounded, summarize } from '../lib/stats';
import type { Summary } from '../lib/stats';
import { loadMonth } from '../usage/load';
import type { UsageDataSpec } from '../usage/load';

/**
 * Issue 39, item 2: deleting a month of 10 million task records past TASK_RETENTION_DAYS must not slow
 * the request path or the record writer. A month of ended tasks queued about 430 days ago (and the month
 * after it, which retention must keep) is generated in a database of the scenario's own, with the usage
 * generator (bench/usage/load.ts) and every index and constraint of tasks; the throughput scenario's
 * load (short completions, idle sim devices) runs at a fixed rate in alternating windows without and
 * with the api's own retention pass (RetentionService.prune(), run by the bench so that it starts and
 * stops with the windows: the api itself runs with TASK_RETENTION_DAYS=0). Measured per window: the
 * requests' latency, and how far Postgres trails Redis (the age of the oldest record in the records
 * stream that no writer has written yet). Then: the month's rows gone, the later ones kept, and
 * `GET /admin/usage` over the month answering as before.
 */
const MODEL = 'bench-retention';
const DAY = 86_400_000;
/** Where the generated month starts, back from the day it is generated; it is 30 days long. */
const MONTH_AGO_DAYS = 430;
const MONTH_DAYS = 30;
/**
 * The month that stays starts this long after the deleted one ends: the cutoff the bench's retention
 * days give falls within the day after the deleted month (days are whole), never in the kept month.
 */
const KEPT_GAP_DAYS = 2;
/** The records stream's oldest entry is read this often. */
const LAG_SAMPLE_MS = 20;
/** After a window's last answer, before its counters are read: the window's records are written meanwhile. */
const SETTLE_MS = 1_000;
/** A copy of the month is cold: the warm-up runs at least this long (unless --quick). */
const WARMUP_MIN_S = 10;
/** The issue's bound: with the deletion running, p99 and the writer's lag within 10 % of without. */
const RATIO_GOAL = 1.1;
/** Bump when what the template holds changes in a way its key does not see. */
const SHAPE_VERSION = 1;
/** `GET /admin/usage` over the deleted month: the big organization by model and by day and status, every organization by org. */
const REPORTS = [
  { org: 'bench-usage-big', group_by: 'model' },
  { org: 'bench-usage-big', group_by: 'day,status' },
  { org: undefined, group_by: 'org' },
] as const;

type Leg = 'without' | 'deleting';

/** The generated months, as the template database's comment records them. */
interface MonthInfo {
  key: string;
  /** Epoch ms of the deleted month's first day (UTC midnight); the kept month starts KEPT_GAP_DAYS after it ends. */
  monthStart: number;
  rows: { month: number; kept: number };
  /** Seconds of each generation phase (insert, usage_rebuild(), indexes, vacuum analyze). */
  phases: Record<string, number>;
}

const isoDay = (ms: number) => new Date(ms).toISOString().slice(0, 10);

/** The bench database's URL with another name: its own name plus `suffix`. */
function databaseNamed(benchUrl: string, suffix: string): { url: string; name: string } {
  const url = new URL(benchUrl);
  const name = `${decodeURIComponent(url.pathname.slice(1))}${suffix}`;
  url.pathname = `/${name}`;
  return { url: url.toString(), name };
}

/**
 * What decides the template's content: the months' sizes, the schema (every migration) and the generator
 * (its build). A template with another key is generated again.
 */
function templateKey(specs: object): string {
  const hash = createHash('sha256');
  hash.update(JSON.stringify({ version: SHAPE_VERSION, specs }));
  const migrations = join(ROOT, 'prisma/migrations');
  for (const dir of readdirSync(migrations).sort()) {
    if (!dir.endsWith('.toml')) {
      hash.update(dir).update(readFileSync(join(migrations, dir, 'migration.sql')));
    }
  }
  hash.update(readFileSync(join(DIST, 'bench/usage/load.js')));
  return hash.digest('hex').slice(0, 16);
}

/**
 * The template database with the months in it: reused when its comment carries the key of what it
 * should hold, else dropped, migrated and generated (about 10 minutes for 10 million tasks on 2 cores,
 * mostly usage_rebuild()). The comment is written last, so that an interrupted generation is redone.
 */
async function prepareTemplate(
  ctx: Ctx,
  admin: pg.Client,
  template: { url: string; name: string },
  tasks: number,
): Promise<{ info: MonthInfo; generated: boolean }> {
  const small = { smallOrgs: 20, smallTasks: Math.max(1, Math.round(tasks / 1000)) };
  const kept = { bigTasks: Math.max(1, Math.round(tasks / 100)), smallTasks: Math.max(1, Math.round(tasks / 100_000)) };
  const key = templateKey({ tasks, ...small, kept, monthAgoDays: MONTH_AGO_DAYS, restore: 'all' });
  const { rows } = await admin.query<{ comment: string | null }>(
    `SELECT shobj_description(oid, 'pg_database') AS comment FROM pg_database WHERE datname = $1`,
    [template.name],
  );
  if (rows[0]?.comment) {
    try {
      const info = JSON.parse(rows[0].comment) as MonthInfo;
      if (info.key === key) {
        return { info, generated: false };
      }
    } catch {
      // not ours, or from an older bench: generated again
    }
  }
  ctx.log(
    `retention: generating ${template.name} (a month of ${tasks.toLocaleString('en')} tasks and the month after)`,
  );
  await resetDatabase({ databaseUrl: template.url, redisUrl: ctx.target.redisUrl });
  const monthStart = Math.floor((Date.now() - MONTH_AGO_DAYS * DAY) / DAY) * DAY;
  const keptStart = monthStart + (MONTH_DAYS + KEPT_GAP_DAYS) * DAY;
  const spec: UsageDataSpec = {
    bigTasks: tasks,
    ...small,
    monthStart: new Date(monthStart).toISOString(),
    days: MONTH_DAYS,
  };
  const pool = new pg.Pool({ connectionString: template.url, max: 2 });
  let info: MonthInfo;
  try {
    const phases = await loadMonth(pool, spec, (m) => ctx.log(m.replace(/^usage: /, 'retention: ')), {
      more: [{ ...kept, monthStart: new Date(keptStart).toISOString(), days: MONTH_DAYS }],
      restore: 'all',
    });
    info = {
      key,
      monthStart,
      rows: {
        month: await countQueued(pool, monthStart, monthStart + MONTH_DAYS * DAY),
        kept: await countQueued(pool, keptStart, keptStart + MONTH_DAYS * DAY),
      },
      phases,
    };
  } finally {
    // A template takes no connections: CREATE DATABASE … TEMPLATE refuses one that has any.
    await pool.end();
  }
  await admin.query(`COMMENT ON DATABASE "${template.name}" IS ${admin.escapeLiteral(JSON.stringify(info))}`);
  return { info, generated: true };
}

async function countQueued(pool: pg.Pool, from: number, to: number, orgId?: string): Promise<number> {
  const { rows } = await pool.query<{ n: string }>(
    `SELECT count(*) AS n FROM tasks WHERE queued_at >= $1 AND queued_at < $2 ${orgId ? 'AND org_id = $3' : ''}`,
    orgId ? [new Date(from), new Date(to), orgId] : [new Date(from), new Date(to)],
  );
  return Number(rows[0].n);
}

/**
 * How far Postgres trails Redis: every LAG_SAMPLE_MS, the age of the oldest entry of the records stream
 * (Redis's clock against the entry's id; a writer deletes an entry once its batch is written, so the
 * oldest one left is the oldest transition not yet in Postgres; 0 when the stream is empty), and the
 * stream's length.
 */
class WriterLag {
  readonly samples: { at: number; lagMs: number; backlog: number }[] = [];
  private readonly redis: RedisClient;
  private readonly stream: string;
  private running = true;
  private readonly loop: Promise<void>;

  constructor(redisUrl: string) {
    this.redis = createRedis(redisUrl);
    this.stream = KeySpace.of(this.redis).records(0);
    this.loop = this.run();
  }

  private async run(): Promise<void> {
    while (this.running) {
      const at = performance.now();
      try {
        const replies = await this.redis
          .pipeline()
          .time()
          .xrange(this.stream, '-', '+', 'COUNT', 1)
          .xlen(this.stream)
          .exec();
        const [time, oldest, length] = (replies ?? []).map(([, value]) => value) as [
          [string, string],
          [string, string[]][],
          number,
        ];
        const nowMs = Number(time[0]) * 1000 + Number(time[1]) / 1000;
        const lagMs = oldest.length > 0 ? Math.max(0, nowMs - Number(oldest[0][0].split('-')[0])) : 0;
        this.samples.push({ at, lagMs, backlog: length });
      } catch {
        // a missed sample
      }
      await sleep(LAG_SAMPLE_MS);
    }
  }

  between(from: number, to: number) {
    return this.samples.filter((s) => s.at >= from && s.at <= to);
  }

  async stop(): Promise<void> {
    this.running = false;
    await this.loop;
    this.redis.disconnect();
  }
}

/**
 * One retention pass of the api's own code (RetentionService.prune(): the advisory lock, batches of
 * RETENTION_BATCH through deleteExpiredTasks, at most TASK_RETENTION_ROWS_PER_SECOND), started and stopped
 * by the bench. Its pool times each batch (a connection taken while the pass holds its lock connection
 * is a batch's: BEGIN … COMMIT), and its logger collects what the pass reports.
 */
class DeletionPass {
  readonly batchMs: number[] = [];
  deleted = 0;
  warning: string | undefined;
  private startedAt = 0;
  private endedAt = 0;
  private pass: Promise<void> = Promise.resolve();
  private readonly service: RetentionService;

  constructor(pool: pg.Pool, databaseUrl: string, days: number) {
    let held = 0;
    const batchMs = this.batchMs;
    const timedPool = {
      async connect(): Promise<PoolClient> {
        const client = await pool.connect();
        const batch = held++ > 0;
        const t0 = performance.now();
        // pg's pool gives a client a release of its own at each checkout: this one is for this checkout only.
        const release = client.release.bind(client);
        client.release = (err?: Error | boolean) => {
          held--;
          if (batch) {
            batchMs.push(performance.now() - t0);
          }
          release(err);
        };
        return client;
      },
    };
    const logger = pino(
      { level: 'info' },
      {
        write: (line: string) => {
          const entry = JSON.parse(line) as {
            level: number;
            msg?: string;
            deleted?: number;
            err?: { message?: string };
          };
          if (typeof entry.deleted === 'number') {
            this.deleted += entry.deleted;
          }
          if (entry.level >= 40) {
            this.warning ??= `${entry.msg}: ${entry.err?.message ?? ''}`;
          }
        },
      },
    );
    // The only member of PrismaService the pass uses is its pg pool.
    const prisma = { pool: timedPool } as unknown as PrismaService;
    this.service = new RetentionService(
      prisma,
      loadConfig({ DATABASE_URL: databaseUrl, TASK_RETENTION_DAYS: String(days) }),
      logger,
    );
  }

  start(): void {
    this.startedAt = performance.now();
    this.pass = this.service.prune().then(() => {
      this.endedAt = performance.now();
    });
  }

  /** Stops after the batch under way (the api's own shutdown path); true when the pass had ended by itself. */
  async stop(): Promise<boolean> {
    const endedBefore = this.endedAt > 0;
    await this.service.onModuleDestroy();
    await this.pass;
    return endedBefore && !this.warning;
  }

  /** Seconds from its start to its end (or to the stop). */
  get seconds(): number {
    return ((this.endedAt || performance.now()) - this.startedAt) / 1000;
  }
}

/** One measured window. */
interface RetentionWindow extends MeasuredWindow {
  leg: Leg;
  /** 1-based position in the run. */
  index: number;
  lag: { at: number; lagMs: number; backlog: number }[];
  walBytes: number;
  checkpoints: number;
  diskBytes: number;
  /** The deletion's, in a window with it. */
  deleted: number;
  deletionS: number;
  batchMs: number[];
  /** The pass ended by itself in this window: the month (everything past the cutoff) was gone. */
  passEnded: boolean;
}

/** A leg's windows taken together, with the writer's lag and what Postgres wrote. */
interface LegResult extends LegTotals {
  leg: Leg;
  lag: Summary;
  backlogMax: number;
  walMBPerS: number;
  diskMBPerS: number;
  checkpoints: number;
  deleted: number;
  deletionS: number;
}

const GROUPS = ['api', 'dispatcher', 'agents', 'postgres', 'redis', 'bench'] as const;

function legResult(leg: Leg, windows: RetentionWindow[]): LegResult {
  const own = windows.filter((w) => w.leg === leg);
  const totals = legTotals(own);
  const perS = (bytes: number) => bytes / 2 ** 20 / (totals.elapsedMs / 1000);
  return {
    ...totals,
    leg,
    lag: summarize(own.flatMap((w) => w.lag.map((s) => s.lagMs))),
    backlogMax: Math.max(0, ...own.flatMap((w) => w.lag.map((s) => s.backlog))),
    walMBPerS: perS(own.reduce((a, w) => a + w.walBytes, 0)),
    diskMBPerS: perS(own.reduce((a, w) => a + w.diskBytes, 0)),
    checkpoints: own.reduce((a, w) => a + w.checkpoints, 0),
    deleted: own.reduce((a, w) => a + w.deleted, 0),
    deletionS: own.reduce((a, w) => a + w.deletionS, 0),
  };
}

function legData(leg: LegResult) {
  return {
    ...legTotalsData(leg),
    writer_lag_ms: rounded(leg.lag),
    records_backlog_max: leg.backlogMax,
    wal_mb_per_s: Math.round(leg.walMBPerS * 100) / 100,
    disk_written_mb_per_s: Math.round(leg.diskMBPerS * 100) / 100,
    checkpoints: leg.checkpoints,
    deleted: leg.deleted,
    deletion_s: Math.round(leg.deletionS * 10) / 10,
  };
}

/** `GET /admin/usage` (the admin token) over the deleted month, each of REPORTS. */
async function usageReports(api: Service, from: string, to: string): Promise<unknown[]> {
  return Promise.all(
    REPORTS.map(async (r) => {
      const url = new URL(`${api.url}/admin/usage`);
      url.search = new URLSearchParams({ from, to, group_by: r.group_by, ...(r.org ? { org: r.org } : {}) }).toString();
      const res = await fetch(url, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
      if (!res.ok) {
        throw new Error(`GET ${url.pathname}${url.search}: HTTP ${res.status} ${(await res.text()).slice(0, 300)}`);
      }
      return res.json();
    }),
  );
}

export async function retentionScenario(ctx: Ctx): Promise<ScenarioResult> {
  const { opts } = ctx;
  const rate = opts.retentionRate;
  const windowMs = opts.retentionWindowS * 1000;
  const devices = opts.throughputDevices;
  const template = databaseNamed(opts.databaseUrl, `_retention_${opts.retentionTasks}`);
  const work = databaseNamed(opts.databaseUrl, '_retention');
  const adminUrl = new URL(opts.databaseUrl);
  adminUrl.pathname = '/postgres';
  const admin = new pg.Client({ connectionString: adminUrl.toString() });
  await admin.connect();

  let api: Service | null = null;
  let dispatcher: Service | null = null;
  let fleet: Fleet | null = null;
  let fixtures: Fixtures | null = null;
  let lagSampler: WriterLag | null = null;
  let postgres: PostgresProcesses | null = null;
  const pools: pg.Pool[] = [];
  const agent = keepAliveAgent(1024);
  try {
    const t0 = performance.now();
    const { info, generated } = await prepareTemplate(ctx, admin, template, opts.retentionTasks);
    const generationS = (performance.now() - t0) / 1000;
    const monthEnd = info.monthStart + MONTH_DAYS * DAY;
    const keptStart = monthEnd + KEPT_GAP_DAYS * DAY;
    const keptEnd = keptStart + MONTH_DAYS * DAY;
    // Whole days back from now that put the cutoff within the day after the month.
    const days = Math.floor((Date.now() - monthEnd) / DAY);

    ctx.log(`retention: copying ${template.name} to ${work.name}`);
    const c0 = performance.now();
    await admin.query(`DROP DATABASE IF EXISTS "${work.name}" WITH (FORCE)`);
    await admin.query(`CREATE DATABASE "${work.name}" TEMPLATE "${template.name}" STRATEGY FILE_COPY`);
    const copyS = (performance.now() - c0) / 1000;

    const target: BenchTarget = { databaseUrl: work.url, redisUrl: ctx.target.redisUrl };
    await resetRedis(target);
    ctx.log('retention: starting api (TASK_RETENTION_DAYS=0: the bench runs its pass) and dispatcher');
    [api, dispatcher] = await Promise.all([
      startApi(target, undefined, { TASK_RETENTION_DAYS: '0' }),
      startDispatcher(target),
    ]);
    ctx.track(api.proc);
    ctx.track(dispatcher.proc);
    fixtures = new Fixtures(target);
    const tenant = await fixtures.tenant();
    await fixtures.enableModel(MODEL);
    const tokens = await fixtures.devices(devices, 'retention');
    fleet = Fleet.spawn('retention-fleet');
    ctx.track(fleet.proc);
    const started = fleet.next('started');
    fleet.send({
      type: 'start',
      mode: 'agents',
      server: dispatcher.url,
      tokens,
      args: [...['--backend', 'sim', '--model', MODEL, '--log-level', 'warn'], ...ZERO_TIME_SIM_ARGS],
    });
    await started;
    await waitOnline(target.redisUrl, MODEL, devices, { procs: [fleet.proc] });
    ctx.log(`retention: ${devices} sim agents online`);

    const checks = new pg.Pool({ connectionString: work.url, max: 2 });
    const deletionPool = new pg.Pool({ connectionString: work.url, max: 2 });
    pools.push(checks, deletionPool);
    postgres = new PostgresProcesses(work.url);
    await postgres.connect();
    const redis = await redisPid(target.redisUrl);
    const groups: CpuGroup[] = [
      { name: 'api', pids: () => [api!.proc.pid] },
      { name: 'dispatcher', pids: () => [dispatcher!.proc.pid] },
      { name: 'agents', pids: () => [fleet!.proc.pid] },
      postgres,
      { name: 'redis', pids: () => (redis ? [redis] : []) },
      { name: 'bench', pids: () => [process.pid] },
    ];
    const url = new URL(`${api.url}/v1/chat/completions`);
    const headers = { authorization: `Bearer ${tenant.key}` };
    const body = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'ping' }], max_tokens: 16 });
    lagSampler = new WriterLag(target.redisUrl);

    const warmupS = opts.quick ? opts.warmupS : Math.max(opts.warmupS, WARMUP_MIN_S);
    ctx.log(`retention: warm-up ${warmupS}s at ${rate}/s`);
    await completionWindow(url, headers, body, agent, rate, warmupS * 1000);
    await recordsWritten(target.redisUrl);
    const liveUntil = Date.now();
    const monthFrom = isoDay(info.monthStart);
    const monthTo = isoDay(monthEnd);
    const before = {
      month: await countQueued(checks, info.monthStart, monthEnd),
      kept: await countQueued(checks, keptStart, keptEnd),
      live: await countQueued(checks, 0, liveUntil, tenant.orgId),
      reports: await usageReports(api, monthFrom, monthTo),
    };
    ctx.log(
      `retention: ${before.month.toLocaleString('en')} rows in ${monthFrom} – ${monthTo} (past the cutoff of ${days} days), ` +
        `${before.kept.toLocaleString('en')} in the month kept, ${before.live} of the warm-up`,
    );

    const windows: RetentionWindow[] = [];
    const measure = async (leg: Leg) => {
      const [cpuBefore, walBefore] = await Promise.all([sampleCpu(groups), walAndCheckpoints(admin)]);
      const machineBefore = machineCpuMs();
      const diskBefore = diskWrittenBytes();
      const pass = leg === 'deleting' ? new DeletionPass(deletionPool, work.url, days) : null;
      const from = performance.now();
      pass?.start();
      const w = await completionWindow(url, headers, body, agent, rate, windowMs);
      const to = performance.now();
      const passEnded = pass ? await pass.stop() : false;
      await sleep(SETTLE_MS);
      const [cpuAfter, walAfter] = await Promise.all([sampleCpu(groups), walAndCheckpoints(admin)]);
      const machineAfter = machineCpuMs();
      const diskAfter = diskWrittenBytes();
      if (pass?.warning) {
        throw new Error(`the retention pass failed: ${pass.warning}`);
      }
      const result: RetentionWindow = {
        leg,
        index: windows.length + 1,
        window: w,
        lag: lagSampler!.between(from, to),
        cpu: cpuDelta(cpuBefore, cpuAfter),
        machineBusyMs: machineAfter.busy - machineBefore.busy,
        machineTotalMs: machineAfter.total - machineBefore.total,
        walBytes: walAfter.lsnBytes - walBefore.lsnBytes,
        checkpoints: walAfter.checkpoints - walBefore.checkpoints,
        diskBytes: diskAfter - diskBefore,
        deleted: pass?.deleted ?? 0,
        deletionS: pass?.seconds ?? 0,
        batchMs: pass?.batchMs ?? [],
        passEnded,
      };
      windows.push(result);
      const s = summarize(w.latencies);
      const lag = summarize(result.lag.map((x) => x.lagMs));
      ctx.log(
        `retention: window ${result.index} ${leg}: ${num((w.completed * 1000) / w.elapsedMs)}/s, p50 ${num(s.p50)} ms, ` +
          `p99 ${num(s.p99)} ms, writer lag p99 ${num(lag.p99)} ms, ${failedIn(w)} failed` +
          (pass
            ? `; deleted ${result.deleted.toLocaleString('en')} rows in ${num(result.deletionS)} s` +
              (passEnded ? ' (the pass ended: nothing left past the cutoff)' : '')
            : ''),
      );
      return result;
    };

    // Without, with, without, …, without: each window with the deletion has one without on either side.
    for (let round = 1; round <= opts.retentionRounds; round++) {
      await measure('without');
      const deleting = await measure('deleting');
      if (deleting.passEnded) {
        break;
      }
    }
    await measure('without');

    await recordsWritten(target.redisUrl);
    const after = {
      month: await countQueued(checks, info.monthStart, monthEnd),
      kept: await countQueued(checks, keptStart, keptEnd),
      live: await countQueued(checks, 0, liveUntil, tenant.orgId),
      reports: await usageReports(api, monthFrom, monthTo),
    };
    const reportsSame = isDeepStrictEqual(before.reports, after.reports);
    const monthGone = windows.some((w) => w.passEnded);

    const without = legResult('without', windows);
    const deleting = legResult('deleting', windows);
    const p99Ratio = deleting.latency.p99 / without.latency.p99;
    const lagRatio = deleting.lag.p99 / without.lag.p99;
    const deleted = before.month - after.month;
    const rowsPerS = deleting.deleted / deleting.deletionS;
    const batches = windows.flatMap((w) => w.batchMs);
    const tenth = Math.max(1, Math.floor(batches.length / 10));
    const batchTrend = { first: median(batches.slice(0, tenth)), last: median(batches.slice(-tenth)) };
    const batchBusy = batches.reduce((a, b) => a + b, 0) / 1000 / deleting.deletionS;
    const monthRows = info.rows.month;
    // The rest at the last window's rate: batches slow down as the deleted rows pile up ahead of the index scan.
    const lastDeleting = windows.filter((w) => w.leg === 'deleting').at(-1);
    const lastRate = lastDeleting ? lastDeleting.deleted / lastDeleting.deletionS : rowsPerS;
    const projectedS = deleting.deletionS + Math.max(0, monthRows - deleting.deleted) / lastRate;
    // Round by round: each window with the deletion against the mean of the windows without on either side.
    const byRound = windows
      .filter((w) => w.leg === 'deleting')
      .map((w) => {
        const around = windows.filter((x) => x.leg === 'without' && Math.abs(x.index - w.index) === 1);
        const p99 = (x: RetentionWindow) => summarize(x.window.latencies).p99;
        const lag = (x: RetentionWindow) => summarize(x.lag.map((l) => l.lagMs)).p99;
        const mean = (f: (x: RetentionWindow) => number) => around.reduce((a, x) => a + f(x), 0) / around.length;
        return { p99: p99(w) / mean(p99), lag: lag(w) / mean(lag) };
      });
    const millions = (n: number) => `${(n / 1e6).toFixed(1)} M`;
    const legsText = `${rate}/s offered, ${deleting.windows} windows of ${opts.retentionWindowS} s with the deletion, ${without.windows} without`;

    const targets: TargetCheck[] = [
      {
        target: `Retention: p99 while deleting a month of ${millions(monthRows)} records ÷ without`,
        goal: `≤ ${RATIO_GOAL.toFixed(2)}`,
        measured: `${num(p99Ratio, 2)} (p99 ${num(deleting.latency.p99)} ms against ${num(without.latency.p99)} ms; ${legsText})`,
        pass: Number.isFinite(p99Ratio) ? p99Ratio <= RATIO_GOAL : null,
      },
      {
        target: 'Retention: record writer lag p99 while deleting ÷ without',
        goal: `≤ ${RATIO_GOAL.toFixed(2)}`,
        measured:
          `${num(lagRatio, 2)} (p99 ${num(deleting.lag.p99)} ms against ${num(without.lag.p99)} ms; ` +
          `age of the oldest unwritten record, sampled every ${LAG_SAMPLE_MS} ms)`,
        pass: Number.isFinite(lagRatio) ? lagRatio <= RATIO_GOAL : null,
      },
      {
        target: 'Retention: usage report of the deleted month unchanged',
        goal: 'exact',
        measured:
          `${REPORTS.length} GET /admin/usage reports ${reportsSame ? 'equal' : 'DIFFER'} before and after; ` +
          `${deleted.toLocaleString('en')} of the month's ${before.month.toLocaleString('en')} rows deleted` +
          (monthGone ? ' (all)' : '') +
          `, kept month ${after.kept.toLocaleString('en')} of ${before.kept.toLocaleString('en')}, ` +
          `warm-up rows ${after.live} of ${before.live}`,
        pass:
          reportsSame &&
          after.kept === before.kept &&
          after.live === before.live &&
          deleted === deleting.deleted &&
          (!monthGone || after.month === 0),
      },
      {
        target: 'Retention: rows/s deleted',
        goal: '—',
        measured:
          `${num(rowsPerS, 0)} rows/s (${deleting.deleted.toLocaleString('en')} rows in ${num(deleting.deletionS)} s); ` +
          (monthGone
            ? `the month of ${millions(monthRows)} went in ${num(deleting.deletionS)} s`
            : `the month of ${millions(monthRows)} would take about ${num(projectedS / 60, 1)} min (the rest at the last window's ${num(lastRate, 0)} rows/s)`),
        pass: null,
      },
    ];

    const legLabel: Record<Leg, string> = { without: 'without deletion', deleting: 'deleting' };
    const legRow = (leg: LegResult) => [
      legLabel[leg.leg],
      String(leg.windows),
      num(leg.completedPerS),
      num(leg.latency.p50, 2),
      num(leg.latency.p90, 2),
      num(leg.latency.p99, 2),
      String(leg.failed),
      num(leg.lag.p50),
      num(leg.lag.p99),
      num(leg.lag.max),
      String(leg.backlogMax),
      ...[...GROUPS, 'other'].map((g) => num(leg.cpuPerCompletion[g], 3)),
      `${Math.round(leg.machineBusy * 100)} %`,
      num(leg.walMBPerS, 1),
      num(leg.diskMBPerS, 1),
      leg.deletionS > 0 ? num(leg.deleted / leg.deletionS, 0) : '—',
    ];
    const summaryTable = mdTable(
      [
        'leg',
        'windows',
        'completed/s',
        'p50 (ms)',
        'p90 (ms)',
        'p99 (ms)',
        'errors + unfinished',
        'writer lag p50 (ms)',
        'p99 (ms)',
        'max (ms)',
        'records unwritten (max)',
        'CPU ms/completion: api',
        'dispatcher',
        'agents',
        'postgres',
        'redis',
        'bench client',
        'other',
        'machine busy',
        'WAL MB/s',
        'disk written MB/s',
        'rows deleted/s',
      ],
      [legRow(without), legRow(deleting)],
      ['l', ...(Array(21).fill('r') as 'r'[])],
    );
    const windowsTable = mdTable(
      [
        'window',
        'leg',
        'completed/s',
        'p50 (ms)',
        'p99 (ms)',
        'writer lag p50 (ms)',
        'p99 (ms)',
        'rows deleted',
        'rows/s',
        'batch median / p99 (ms)',
        'WAL MB',
        'disk written MB',
        'checkpoints',
      ],
      windows.map((w) => {
        const s = summarize(w.window.latencies);
        const lag = summarize(w.lag.map((x) => x.lagMs));
        return [
          String(w.index),
          legLabel[w.leg] + (w.passEnded ? ' (month gone)' : ''),
          num((w.window.completed * 1000) / w.window.elapsedMs),
          num(s.p50, 2),
          num(s.p99, 2),
          num(lag.p50),
          num(lag.p99),
          w.leg === 'deleting' ? w.deleted.toLocaleString('en') : '',
          w.leg === 'deleting' ? num(w.deleted / w.deletionS, 0) : '',
          w.batchMs.length ? `${num(median(w.batchMs))} / ${num(percentile(w.batchMs, 99))}` : '',
          num(w.walBytes / 2 ** 20, 0),
          num(w.diskBytes / 2 ** 20, 0),
          String(w.checkpoints),
        ];
      }),
      ['r', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
    );
    const firstError = without.firstError ?? deleting.firstError;
    const phases = Object.entries(info.phases)
      .map(([k, v]) => `${k} ${v.toFixed(0)} s`)
      .join(', ');
    return {
      name: 'retention',
      title: 'Retention: deleting a month of task records under load',
      table: `${summaryTable}\n\n${windowsTable}`,
      notes: [
        `Data: ${info.rows.month.toLocaleString('en')} ended tasks queued ${monthFrom} – ${monthTo} (the usage scenario's generator, bench/usage/load.ts: ` +
          `one organization with ${opts.retentionTasks.toLocaleString('en')} and 20 small ones) and ${info.rows.kept.toLocaleString('en')} in the 30 days from ${isoDay(keptStart)}, ` +
          'with every index and constraint of tasks and the usage rollups; ' +
          (generated
            ? `generated in this run in ${num(generationS, 0)} s (${phases}), then `
            : `generated by an earlier run (${phases}) and kept in ${template.name}, `) +
          `copied (CREATE DATABASE … TEMPLATE) in ${num(copyS, 0)} s.`,
        `The load: the throughput scenario's, ${devices} idle sim devices (\`${ZERO_TIME_SIM_ARGS.join(' ')}\`) in one process, non-streamed requests (\`max_tokens\` 16), ` +
          `open loop at ${rate}/s, latency from the moment each request was due to its whole answer; ${warmupS} s of warm-up, then windows of ${opts.retentionWindowS} s, ` +
          'without and with the deletion in turn, beginning and ending without; a leg is its windows taken together.',
        `The deletion: the api's RetentionService.prune() (apps/api/src/usage/retention.service.ts) with TASK_RETENTION_DAYS ${days} (the cutoff falls on the day after the month), ` +
          'run by the bench from the start of each window with it to its end, then stopped as the api stops it (after the batch under way), the next window resuming where it stopped; ' +
          'the api itself runs with TASK_RETENTION_DAYS=0 so that its own pass never starts by itself.',
        `Writer lag: every ${LAG_SAMPLE_MS} ms, the age of the oldest entry of the records stream (Redis's clock against the entry's id; a writer deletes an entry once it is in Postgres), 0 when the stream is empty: ` +
          "how far Postgres trails Redis, at most LINGER_MS (250 ms) plus a batch's write when the writers keep up. Unwritten = the stream's length.",
        `Batches (deleteExpiredTasks' BEGIN … COMMIT, ${RETENTION_BATCH.toLocaleString('en')} rows): median ${num(median(batches))} ms, p99 ${num(percentile(batches, 99))} ms over ${batches.length} batches ` +
          `(first tenth ${num(batchTrend.first)} ms, last tenth ${num(batchTrend.last)} ms); the pass was in a batch ${Math.round(batchBusy * 100)} % of its time.`,
        'CPU ms per completion from /proc (utime + stime), over each window and the second after it: postgres = the backends of the scenario database (the deletion’s included) + WAL writer, ' +
          'background writer, checkpointer; other = the rest of the machine. WAL and checkpoints: the whole server (pg_current_wal_lsn, pg_stat_bgwriter); disk written: the whole machine (/proc/diskstats).',
        `Checks after the last window: the rows of the month left (${after.month.toLocaleString('en')}), the kept month's and the warm-up's rows (all there, or the line fails), and ` +
          `${REPORTS.map((r) => `\`GET /admin/usage?${r.org ? `org=${r.org}&` : ''}from=${monthFrom}&to=${monthTo}&group_by=${r.group_by}\``).join(', ')} answered as before the first window.`,
        `Round by round, each window with the deletion against the mean of the two without beside it: p99 ${byRound.map((r) => num(r.p99, 2)).join(', ')} ` +
          `(median ${num(median(byRound.map((r) => r.p99)), 2)}); writer lag p99 ${byRound.map((r) => num(r.lag, 2)).join(', ')} (median ${num(median(byRound.map((r) => r.lag)), 2)}).`,
        ...(firstError ? [`First error: ${firstError}`] : []),
      ],
      targets,
      data: {
        devices,
        offered_per_s: rate,
        window_s: opts.retentionWindowS,
        retention_days: days,
        month: { from: monthFrom, to: monthTo, rows: info.rows.month, kept_rows: info.rows.kept },
        generation: { generated_this_run: generated, seconds: Math.round(generationS), phases: info.phases },
        copy_s: Math.round(copyS),
        legs: { without: legData(without), deleting: legData(deleting) },
        p99_ratio: Math.round(p99Ratio * 1000) / 1000,
        writer_lag_p99_ratio: Math.round(lagRatio * 1000) / 1000,
        deleted_rows: deleted,
        deleted_per_s: Math.round(rowsPerS),
        month_gone: monthGone,
        projected_month_s: Math.round(projectedS),
        ratios_by_round: byRound.map((r) => ({
          p99: Math.round(r.p99 * 1000) / 1000,
          writer_lag_p99: Math.round(r.lag * 1000) / 1000,
        })),
        batches_ms: {
          ...rounded(summarize(batches)),
          first_tenth_median: Math.round(batchTrend.first * 10) / 10,
          last_tenth_median: Math.round(batchTrend.last * 10) / 10,
          busy_share: Math.round(batchBusy * 1000) / 1000,
        },
        checks: {
          before: { ...before, reports: undefined },
          after: { ...after, reports: undefined },
          reports_equal: reportsSame,
        },
        windows: windows.map((w) => ({
          index: w.index,
          leg: w.leg,
          completed: w.window.completed,
          failed: failedIn(w.window),
          completed_per_s: Math.round(((w.window.completed * 1000) / w.window.elapsedMs) * 10) / 10,
          latency_ms: rounded(summarize(w.window.latencies)),
          writer_lag_ms: rounded(summarize(w.lag.map((x) => x.lagMs))),
          deleted: w.deleted,
          deletion_s: Math.round(w.deletionS * 10) / 10,
          wal_mb: Math.round((w.walBytes / 2 ** 20) * 10) / 10,
          disk_written_mb: Math.round((w.diskBytes / 2 ** 20) * 10) / 10,
          checkpoints: w.checkpoints,
          pass_ended: w.passEnded,
        })),
      },
    };
  } finally {
    agent.destroy();
    await lagSampler?.stop();
    await fleet?.stop();
    await Promise.all([api?.proc.stop(), dispatcher?.proc.stop()]);
    await postgres?.close();
    await Promise.all(pools.map((p) => p.end().catch(() => undefined)));
    await fixtures?.close();
    // The copy goes (the template stays for the next run).
    await admin.query(`DROP DATABASE IF EXISTS "${work.name}" WITH (FORCE)`).catch(() => undefined);
    await admin.end();
  }
}

/** The server's WAL position (bytes) and checkpoints so far (timed and requested). */
async function walAndCheckpoints(admin: pg.Client): Promise<{ lsnBytes: number; checkpoints: number }> {
  const { rows } = await admin.query<{ lsn: string; checkpoints: string }>(
    `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::text AS lsn,
            (SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter)::text AS checkpoints`,
  );
  return { lsnBytes: Number(rows[0].lsn), checkpoints: Number(rows[0].checkpoints) };
}

/** Bytes written to the machine's disks so far (/proc/diskstats, whole disks: every writer on the machine). */
function diskWrittenBytes(): number {
  let sectors = 0;
  for (const line of readFileSync('/proc/diskstats', 'utf8').split('\n')) {
    const fields = line.trim().split(/\s+/);
    if (/^(?:[shv]d[a-z]+|xvd[a-z]+|nvme\d+n\d+)$/.test(fields[2] ?? '')) {
      sectors += Number(fields[9]);
    }
  }
  return sectors * 512;
}
