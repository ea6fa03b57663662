import type { ChildProcess, StdioOptions } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import {
  AdminService,
  DISPATCHER_SCRIPT,
  ServiceProcess,
  createPrismaClient,
  createRedis,
  connectRedis,
  freePort,
  loadConfig,
  redisTargetOf,
  newDeviceToken,
  nodeCommand,
  spawnNode,
  waitForHttp,
  KeySpace,
} from '@app/common';
import type { PrismaClient, RedisClient } from '@app/common';

/** The build's root (dist/), from dist/bench/lib. */
export const DIST = join(__dirname, '..', '..');
/** The repository root. */
export const ROOT = join(DIST, '..');
export const ADMIN_TOKEN = 'bench-admin-token-0123456789abcdefghijklm';

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A port the kernel picks: the bench runs alone, so that any free port will do. */
export { freePort };

/** Output kept per stream of a process: enough for a failure report, bounded so that a chatty process cannot fill memory. */
const KEEP_OUTPUT_CHARS = 64 * 1024;

/** A child process of the bench, with the tail of its output. */
export class Proc extends ServiceProcess {
  constructor(name: string, child: ChildProcess) {
    super(child, { name, keepChars: KEEP_OUTPUT_CHARS });
  }

  /** Stops the process and waits for it: SIGTERM, then SIGKILL after the grace period. */
  async stop(graceMs = 10_000): Promise<void> {
    await this.terminate('SIGTERM', graceMs);
  }
}

/** Where the bench keeps its data: a database and a Redis database of its own, wiped at the start. */
export interface BenchTarget {
  databaseUrl: string;
  redisUrl: string;
  /** Seed nodes of a Redis Cluster (REDIS_CLUSTER_NODES): the processes use it instead of redisUrl. */
  clusterSeeds?: string;
}

/** Drops and re-creates the bench database (only one whose name says it is a bench's), then migrates it. */
export async function resetDatabase(target: BenchTarget): Promise<void> {
  const url = new URL(target.databaseUrl);
  const name = decodeURIComponent(url.pathname.slice(1));
  if (!/bench/.test(name) || !/^[A-Za-z0-9_]+$/.test(name)) {
    throw new Error(`refusing to drop database "${name}": the bench only wipes a database whose name contains "bench"`);
  }
  url.pathname = '/postgres';
  const client = new pg.Client({ connectionString: url.toString() });
  await client.connect();
  try {
    await client.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
  } finally {
    await client.end();
  }
  const migrate = new Proc(
    'migrate',
    spawnNode('apps/cli/src/migrate.js', [], {
      build: DIST,
      env: { PATH: process.env.PATH, DATABASE_URL: target.databaseUrl },
    }),
  );
  if ((await migrate.exited) !== 0) {
    throw new Error(`migration failed:\n${migrate.output}`);
  }
}

/**
 * Empties the bench's Redis database, unless another program is connected to it: on a machine
 * shared with other test runs, flushing a database someone else uses would break their run.
 */
export async function resetRedis(target: BenchTarget): Promise<void> {
  const redis = createRedis(target.redisUrl);
  try {
    const self = await redis.client('ID');
    const index = Number(new URL(target.redisUrl).pathname.slice(1) || '0');
    const list = (await redis.client('LIST')) as string;
    const others = list
      .split('\n')
      .filter((line) => line.includes(` db=${index} `) && !line.startsWith(`id=${String(self)} `));
    if (others.length > 0) {
      const names = [...new Set(others.map((l) => /\bname=(\S*)/.exec(l)?.[1] || '(unnamed)'))].join(', ');
      throw new Error(
        `Redis database ${index} is in use by ${others.length} other connection(s) (${names}); ` +
          'the bench flushes its database, so choose a free one with --redis-url (or BENCH_REDIS_URL)',
      );
    }
    await redis.flushdb();
  } finally {
    redis.disconnect();
  }
}

/** How api and dispatcher are started when the run profiles them. */
export interface ProfileOptions {
  dir: string;
  /** File name without the directory, e.g. throughput-api.cpuprofile. */
  name: string;
}

/** The bench's Node flags beyond a script's own: a full GC on a signal (collectable), the CPU profile. */
function benchFlags(profile?: ProfileOptions, collectable = false): string[] {
  const flags: string[] = [];
  if (collectable) {
    flags.push('--expose-gc', '--require', join(DIST, 'bench/lib/gc-signal.js'));
  }
  if (profile) {
    mkdirSync(profile.dir, { recursive: true });
    // clean-exit.js turns the re-raised SIGTERM of Nest's shutdown hook into process.exit, so that V8 writes the profile.
    flags.push(
      '--cpu-prof',
      '--cpu-prof-dir',
      profile.dir,
      '--cpu-prof-name',
      profile.name,
      '--require',
      join(DIST, 'bench/lib/clean-exit.js'),
    );
  }
  return flags;
}

/** Node's arguments for a script of the build, with its own flags and the bench's. */
export function nodeArgs(script: string, args: string[], profile?: ProfileOptions, collectable = false): string[] {
  return nodeCommand(script, args, { build: DIST, flags: benchFlags(profile, collectable) });
}

export function startNode(
  name: string,
  script: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  opts: { profile?: ProfileOptions; stdio?: StdioOptions; collectable?: boolean } = {},
): Proc {
  const flags = benchFlags(opts.profile, opts.collectable);
  return new Proc(name, spawnNode(script, args, { build: DIST, env, stdio: opts.stdio, flags }));
}

export function baseEnv(target: BenchTarget, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  return {
    PATH: process.env.PATH,
    DATABASE_URL: target.databaseUrl,
    REDIS_URL: target.redisUrl,
    ...(target.clusterSeeds ? { REDIS_CLUSTER_NODES: target.clusterSeeds } : {}),
    LOG_LEVEL: 'warn',
    HOST: '127.0.0.1',
    ...extra,
  };
}

export async function waitHttp(url: string, proc: Proc, timeoutMs = 30_000): Promise<void> {
  await waitForHttp(url, { timeoutMs, process: proc });
}

/**
 * Runs a full garbage collection in an api or dispatcher the bench started (see gc-signal.ts) and
 * gives it a moment, so that the memory read next is live memory.
 */
export async function collectGarbage(...procs: Proc[]): Promise<void> {
  for (const proc of procs) {
    if (proc.running) {
      proc.child.kill('SIGUSR2');
    }
  }
  await sleep(500);
}

/** A started api or dispatcher. */
export interface Service {
  url: string;
  port: number;
  proc: Proc;
}

/** Starts an api; `extra` are settings of the scenario's own (e.g. EMBED_BATCH_MAX). */
export async function startApi(
  target: BenchTarget,
  profile?: ProfileOptions,
  extra: Record<string, string> = {},
): Promise<Service> {
  const port = await freePort();
  const env = baseEnv(target, { ...extra, API_PORT: String(port), ADMIN_TOKEN });
  const proc = startNode('api', 'apps/api/src/main.js', [], env, { profile, collectable: true });
  const url = `http://127.0.0.1:${port}`;
  await waitHttp(`${url}/healthz`, proc);
  return { url, port, proc };
}

export async function startDispatcher(target: BenchTarget, profile?: ProfileOptions): Promise<Service> {
  const port = await freePort();
  const proc = startNode('dispatcher', DISPATCHER_SCRIPT, [], baseEnv(target, { DISPATCHER_PORT: String(port) }), {
    profile,
    collectable: true,
  });
  const url = `http://127.0.0.1:${port}`;
  await waitHttp(`${url}/healthz`, proc);
  return { url, port, proc };
}

/** Fixtures in the bench database: one organization with a key, the models, the devices. */
export class Fixtures {
  readonly db: PrismaClient;
  private readonly admin: AdminService;
  private orgName: string | null = null;

  constructor(target: BenchTarget) {
    this.db = createPrismaClient(target.databaseUrl);
    this.admin = new AdminService(this.db);
  }

  /** The bench's organization (no limits) and an API key for it. */
  async tenant(): Promise<{ orgId: string; key: string }> {
    const org = await this.admin.createOrg(`bench-${Date.now().toString(36)}`);
    this.orgName = org.name;
    const key = await this.admin.createKey({ org: org.name, label: 'bench' });
    return { orgId: org.id, key: key.key };
  }

  /** Another organization with a scheduling weight, its models enabled, and a key. */
  async org(label: string, weight: number, model: string | string[]): Promise<{ orgId: string; key: string }> {
    const org = await this.admin.createOrg(`bench-${label}-${Date.now().toString(36)}`);
    await this.db.organization.update({ where: { id: org.id }, data: { weight } });
    for (const id of typeof model === 'string' ? [model] : model) {
      await this.db.model.upsert({ where: { id }, create: { id, network: true }, update: {} });
      await this.admin.enableModel(id, org.name);
    }
    const key = await this.admin.createKey({ org: org.name, label: 'bench' });
    return { orgId: org.id, key: key.key };
  }

  /** A network model in the catalog, enabled for the bench's organization; `embedding` for the embeddings routes. */
  async enableModel(model: string, kind: 'chat' | 'embedding' = 'chat'): Promise<void> {
    if (!this.orgName) {
      throw new Error('create the tenant first');
    }
    await this.db.model.upsert({ where: { id: model }, create: { id: model, network: true, kind }, update: {} });
    await this.admin.enableModel(model, this.orgName);
  }

  /**
   * Registers devices in one insert (the admin service would take one round trip each) and returns
   * their tokens: network devices, or device i belongs to `orgIds[i]` (a direct device) when given.
   */
  async devices(count: number, prefix: string, orgIds?: string[]): Promise<string[]> {
    const tokens = Array.from({ length: count }, () => newDeviceToken());
    await this.db.device.createMany({
      data: tokens.map((t, i) => ({
        name: `${prefix}-${i}`,
        tokenHash: t.hash,
        tokenPrefix: t.prefix,
        orgId: orgIds?.[i] ?? null,
      })),
    });
    return tokens.map((t) => t.secret);
  }

  async close(): Promise<void> {
    await this.db.$disconnect();
  }
}

/** Waits until every task transition so far is in Postgres (the records stream is drained by its writers). */
export async function recordsWritten(redisUrl: string, timeoutMs = 30_000): Promise<void> {
  const redis = createRedis(redisUrl);
  try {
    const deadline = Date.now() + timeoutMs;
    while ((await redis.xlen(KeySpace.of(redis).records(0))) > 0) {
      if (Date.now() > deadline) {
        throw new Error('task records were not written to Postgres in time');
      }
      await sleep(20);
    }
  } finally {
    redis.disconnect();
  }
}

/** How many devices are online for a model in the network pool (their presence is published). */
export async function onlineCount(redisUrl: string, model: string): Promise<number> {
  const redis = createRedis(redisUrl);
  try {
    return await redis.zcount(KeySpace.of(redis).presence('network', model), Date.now(), '+inf');
  } finally {
    redis.disconnect();
  }
}

/** Waits until `count` devices are online for the model (in the network pool, or `pool`); returns how long that took. */
/** A command connection to the bench's Redis: its cluster when it has one. */
export function benchRedis(target: Pick<BenchTarget, 'redisUrl' | 'clusterSeeds'>): RedisClient {
  return target.clusterSeeds
    ? connectRedis(redisTargetOf(loadConfig({ REDIS_CLUSTER_NODES: target.clusterSeeds })), 'commands')
    : createRedis(target.redisUrl);
}

export async function waitOnline(
  redisUrl: string,
  model: string,
  count: number,
  opts: { timeoutMs?: number; procs?: Proc[]; pool?: string; clusterSeeds?: string } = {},
): Promise<number> {
  const started = performance.now();
  const deadline = Date.now() + (opts.timeoutMs ?? 120_000);
  const redis = benchRedis({ redisUrl, clusterSeeds: opts.clusterSeeds });
  try {
    for (;;) {
      const online = await redis.zcount(KeySpace.of(redis).presence(opts.pool ?? 'network', model), Date.now(), '+inf');
      if (online >= count) {
        return performance.now() - started;
      }
      const dead = opts.procs?.find((p) => !p.running);
      if (dead) {
        throw new Error(`${dead.name} exited while devices were connecting:\n${dead.output}`);
      }
      if (Date.now() > deadline) {
        throw new Error(`only ${online} of ${count} devices came online for ${model}`);
      }
      await sleep(20);
    }
  } finally {
    redis.disconnect();
  }
}
