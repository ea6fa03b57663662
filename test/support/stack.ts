import type { ChildProcess } from 'node:child_process';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import {
  AdminService,
  DISPATCHER_SCRIPT,
  ServiceProcess,
  canBind,
  createPrismaClient,
  createRedis,
  sha256Hex,
  spawnNode,
  waitForHttp,
  KeySpace,
  connectRedis,
  redisTargetOf,
  loadConfig,
} from '@app/common';
import type { PrismaClient } from '@app/common';
import { runCli } from '../../apps/cli/src/cli';
import { TEST_ENV } from '../jest/test-env';

/** This run's transpiled apps (see test/jest/transpile.ts): what the real processes run. */
export const DIST = process.env[TEST_ENV.build] ?? '';
/** This run's own Postgres and Redis databases (see test/jest/global-setup.ts). */
export const DATABASE_URL = process.env[TEST_ENV.databaseUrl] ?? '';
export const REDIS_URL = process.env[TEST_ENV.redisUrl] ?? '';
export const ADMIN_TOKEN = 'test-admin-token-0123456789abcdefghijklmn';

/** Longer than any deadline a test provokes on purpose (queue and stream timeouts are set shorter). */
const HTTP_TIMEOUT_MS = 90_000;

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A short random suffix that keeps names of concurrent test files apart. */
export const uniq = (prefix: string) => `${prefix}-${randomBytes(4).toString('hex')}`;

/**
 * Ports for the processes a test starts, below the kernel's ephemeral range (so that none is one the
 * kernel hands out to a client). Test runs at once each take a block of their own, chosen by the Redis
 * database the run claimed (1-15: no two runs at once have the same), so that one run never starts a
 * process on a port another run just picked; within a run, each Jest worker takes a quarter of the
 * block, and a port is handed out again only after the worker's quarter was gone through.
 */
const PORT_BASE = 20_000;
const PORTS_PER_RUN = 704;
const WORKERS_PER_RUN = 4;
let portCursor = 0;

export async function freePort(): Promise<number> {
  const run = Math.max(0, Number(REDIS_URL ? new URL(REDIS_URL).pathname.slice(1) || '1' : '1') - 1) % 15;
  const worker = (Number(process.env.JEST_WORKER_ID ?? '1') - 1) % WORKERS_PER_RUN;
  const size = PORTS_PER_RUN / WORKERS_PER_RUN;
  const start = PORT_BASE + run * PORTS_PER_RUN + worker * size;
  for (let tries = 0; tries < size; tries++) {
    const port = start + (portCursor++ % size);
    if (await canBind(port)) {
      return port;
    }
  }
  throw new Error(`no free port in this worker's range (${start}-${start + size - 1})`);
}

/** A real child process of a test, with all its output kept for assertions and for failure reports. */
export class Proc extends ServiceProcess {
  private stopping = false;

  constructor(child: ChildProcess) {
    super(child);
    // A process that ends by itself with an error code (a crash, an exit on a fatal error) while its test
    // still uses it: its last words go to the test run's output, where a failure report can be read
    // against them. A process stopped by its test, or killed by a signal the test sent, is not reported.
    child.on('exit', (code) => {
      if (code !== null && code !== 0 && !this.stopping) {
        process.stderr.write(
          `[test process ${child.pid}] exited by itself, code ${code}; its last output:\n${this.output.slice(-2_000)}\n`,
        );
      }
    });
  }

  /** Stops the process and waits for it (SIGKILL after a grace period). */
  stop(signal: NodeJS.Signals = 'SIGTERM', graceMs = 5_000): Promise<number | null> {
    this.stopping = true;
    return this.terminate(signal, graceMs);
  }
}

export function baseEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  return {
    PATH: process.env.PATH,
    DATABASE_URL,
    REDIS_URL,
    LOG_LEVEL: 'warn',
    HOST: '127.0.0.1',
    // Suites share one database: an api's retention pass would delete the old records another suite
    // made on purpose. A suite that tests retention sets its own.
    TASK_RETENTION_DAYS: '0',
    ...extra,
  };
}

/** Runs one of this run's transpiled entry points (`apps/api/src/main.js`) with its Node flags. */
export function startNode(script: string, args: string[], env: NodeJS.ProcessEnv): Proc {
  return new Proc(spawnNode(script, args, { build: DIST, env }));
}

/** Generous: CI machines are shared and a cold start under load can take a while. */
const START_TIMEOUT_MS = 60_000;

async function waitHttp(url: string, proc: Proc): Promise<void> {
  try {
    await waitForHttp(url, { timeoutMs: START_TIMEOUT_MS, process: proc });
  } catch (error) {
    // Never leave a process behind: a test file with a live child never exits.
    await proc.stop('SIGKILL');
    throw error;
  }
}

export interface Api {
  url: string;
  port: number;
  proc: Proc;
  stop(): Promise<void>;
}

/**
 * Starts the api as a real process, on a free port or on the one given (a restart in place), and waits
 * until it is ready (/readyz: Postgres and Redis answer), as a load balancer would before sending it
 * traffic: a cold start on a busy machine listens before its first connections are made, and a request
 * then gets 503 service_unavailable. `ready: false` waits only until it is alive (/healthz), for an api
 * whose Postgres or Redis is down on purpose.
 */
export async function startApi(
  env: Record<string, string> = {},
  at?: number,
  opts: { ready?: boolean } = {},
): Promise<Api> {
  const port = at ?? (await freePort());
  const proc = startNode('apps/api/src/main.js', [], baseEnv({ API_PORT: String(port), ADMIN_TOKEN, ...env }));
  const url = `http://127.0.0.1:${port}`;
  await waitHttp(`${url}${opts.ready === false ? '/healthz' : '/readyz'}`, proc);
  return { url, port, proc, stop: async () => void (await proc.stop()) };
}

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs one admin CLI command in this process, through the same command layer as the binary (the
 * command line parsing, AdminService, the output), with its output captured.
 */
export async function cli(args: string[], env: Record<string, string> = {}): Promise<CliResult> {
  let stdout = '';
  let stderr = '';
  const code = await runCli(['node', 'switchyard', ...args], {
    stdout: { write: (text: string) => (stdout += text) },
    stderr: { write: (text: string) => (stderr += text) },
    env: baseEnv(env),
  });
  return { code, stdout, stderr };
}

/** Runs the admin CLI binary as a real process. */
export function cliProcess(args: string[], env: Record<string, string> = {}): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [join(DIST, 'apps/cli/src/main.js'), ...args],
      { env: baseEnv(env) },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

let sharedDb: PrismaClient | undefined;
/** A Prisma client on the test database, for fixtures and for asserting what the database holds. */
export function db(): PrismaClient {
  sharedDb ??= createPrismaClient(DATABASE_URL);
  return sharedDb;
}

export async function closeDb(): Promise<void> {
  await sharedDb?.$disconnect();
  sharedDb = undefined;
}

export interface Tenant {
  org: { id: string; name: string };
  key: string;
  keyId: string;
}

/** An organization with one API key and the given models (created in the catalog when missing) enabled. */
export async function createTenant(models: string[] = []): Promise<Tenant> {
  const admin = new AdminService(db());
  const org = await admin.createOrg(uniq('org'));
  const key = await admin.createKey({ org: org.name });
  await ensureCatalog(models);
  for (const model of models) {
    await admin.enableModel(model, org.name);
  }
  return { org, key: key.key, keyId: key.id };
}

/** JSON over HTTP, returning status, headers and the parsed body. */
export async function http(
  method: string,
  url: string,
  opts: { body?: unknown; headers?: Record<string, string>; raw?: string } = {},
): Promise<{ status: number; headers: Headers; body: any; text: string }> {
  const headers: Record<string, string> = { ...opts.headers };
  let body: string | undefined = opts.raw;
  if (opts.body !== undefined) {
    headers['content-type'] ??= 'application/json';
    body = JSON.stringify(opts.body);
  }
  // A bound on every call: a hang becomes a failure with a message, not a stalled run.
  const res = await fetch(url, { method, headers, body, signal: AbortSignal.timeout(HTTP_TIMEOUT_MS) });
  const text = await res.text();
  let parsed: unknown = undefined;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = undefined;
  }
  return { status: res.status, headers: res.headers, body: parsed, text };
}

export interface Dispatcher {
  url: string;
  port: number;
  proc: Proc;
  stop(signal?: NodeJS.Signals): Promise<void>;
}

/** Starts the dispatcher as a real process, on a free port or on the one given (a restart in place). */
export async function startDispatcher(env: Record<string, string> = {}, at?: number): Promise<Dispatcher> {
  const port = at ?? (await freePort());
  const proc = startNode(DISPATCHER_SCRIPT, [], baseEnv({ DISPATCHER_PORT: String(port), ...env }));
  const url = `http://127.0.0.1:${port}`;
  await waitHttp(`${url}/healthz`, proc);
  return { url, port, proc, stop: async (signal = 'SIGTERM') => void (await proc.stop(signal)) };
}

/** Registers a device (of an org, or of the network without one) and returns its id and token. */
export async function createDevice(orgName?: string): Promise<{ id: string; token: string }> {
  const device = await new AdminService(db()).createDevice(uniq('device'), orgName);
  return { id: device.id, token: device.token };
}

export interface DeviceOptions {
  models: string[];
  ttftMs?: number;
  tokensPerSecond?: number;
  tokens?: number;
  features?: string[];
  extraArgs?: string[];
}

/** The switchyard-device arguments of a sim device. */
export function simDeviceArgs(server: string, token: string, opts: DeviceOptions): string[] {
  const args = ['--server', server, '--token', token, '--backend', 'sim', '--log-level', 'info'];
  for (const model of opts.models) {
    args.push('--model', model);
  }
  args.push('--sim-ttft-ms', String(opts.ttftMs ?? 0));
  args.push('--sim-tokens-per-second', String(opts.tokensPerSecond ?? 0));
  args.push('--sim-tokens', String(opts.tokens ?? 8));
  if (opts.features) {
    args.push('--sim-features', opts.features.length ? opts.features.join(',') : 'none');
  }
  args.push(...(opts.extraArgs ?? []));
  return args;
}

/**
 * Adds the models to the catalog when missing: a device may serve only catalog models (the
 * dispatcher refuses the others), as an operator adds a model before its devices announce it. They
 * are marked for the network, which most suites' devices are; a suite that needs a model of its
 * organizations only creates it itself.
 */
export async function ensureCatalog(models: string[]): Promise<void> {
  for (const id of models) {
    // Two suites may race to add the same model: the loser finds it there.
    await db()
      .model.upsert({ where: { id }, create: { id, network: true }, update: {} })
      .catch(() => db().model.findUniqueOrThrow({ where: { id } }));
  }
}

/** Where a device is expected online, and how long to wait for it. */
export interface OnlineOptions {
  /** `network` (default) or the org id of a direct device. */
  pool?: string;
  /** The Redis the dispatcher publishes presence to (default: this run's). */
  redisUrl?: string;
  /** Or the seed nodes of the Redis Cluster it publishes to (REDIS_CLUSTER_NODES). */
  clusterSeeds?: string;
  timeoutMs?: number;
  /** A process whose exit ends the wait early (with its output in the error). */
  proc?: Proc;
}

/** The device's row id for a token. */
export async function deviceIdOf(token: string): Promise<string> {
  const device = await db().device.findUniqueOrThrow({ where: { tokenHash: sha256Hex(token) } });
  return device.id;
}

/**
 * Starts a real device agent with the sim backend and, unless `wait` is false, waits until the
 * dispatcher has it online for every model (its presence is published), so that requests can be
 * routed to it. A device that does not come online is killed.
 */
export async function startDevice(
  dispatcher: { url: string } | string,
  token: string,
  opts: DeviceOptions,
  where: Omit<OnlineOptions, 'proc'> & { wait?: boolean } = {},
): Promise<Proc> {
  const url = typeof dispatcher === 'string' ? dispatcher : dispatcher.url;
  await ensureCatalog(opts.models);
  const proc = startNode('apps/device/src/main.js', simDeviceArgs(url, token, opts), baseEnv());
  if (where.wait === false) {
    return proc;
  }
  try {
    await waitOnline(opts.models, token, { ...where, proc });
  } catch (error) {
    await proc.stop('SIGKILL');
    throw error;
  }
  return proc;
}

/** Waits until a device's presence is published for each model in the pool. */
export async function waitOnline(models: string[], token: string, opts: OnlineOptions = {}): Promise<void> {
  const deviceId = await deviceIdOf(token);
  const redis = opts.clusterSeeds
    ? connectRedis(redisTargetOf(loadConfig({ REDIS_CLUSTER_NODES: opts.clusterSeeds })), 'commands')
    : createRedis(opts.redisUrl ?? REDIS_URL);
  redis.on('error', () => undefined);
  try {
    const deadline = Date.now() + (opts.timeoutMs ?? START_TIMEOUT_MS);
    for (;;) {
      const found = await Promise.all(
        models.map(async (m) =>
          (
            await redis
              .zrangebyscore(KeySpace.of(redis).presence(opts.pool ?? 'network', m), Date.now(), '+inf')
              .catch(() => [])
          ).some((x) => x.startsWith(`${deviceId}|`)),
        ),
      );
      if (found.every(Boolean)) {
        return;
      }
      if (Date.now() > deadline || (opts.proc && opts.proc.child.exitCode !== null)) {
        throw new Error(`device did not come online for ${models.join(', ')}; output:\n${opts.proc?.output ?? ''}`);
      }
      await sleep(25);
    }
  } finally {
    redis.disconnect();
  }
}

/**
 * Waits until every task transition so far is in Postgres: task records are written behind their
 * transitions (TaskRecordWriter), which delete their entries from the records stream once written.
 * A test reads task rows after this, as an operator's later query would. A suite whose processes run
 * on a Redis of its own passes its URL: the run's Redis has no writer then, and may hold records that
 * an earlier suite's processes left there.
 */
export async function recordsWritten(redisUrl = REDIS_URL, timeoutMs = 15_000): Promise<void> {
  const redis = createRedis(redisUrl);
  try {
    // Only the records there now: other suites keep adding theirs, and the stream is seldom empty.
    const [last] = await redis.xrevrange(KeySpace.of(redis).records(0), '+', '-', 'COUNT', 1);
    if (!last) {
      return;
    }
    const deadline = Date.now() + timeoutMs;
    while ((await redis.xrange(KeySpace.of(redis).records(0), '-', last[0], 'COUNT', 1)).length > 0) {
      if (Date.now() > deadline) {
        throw new Error('task records were not written to Postgres in time');
      }
      await sleep(10);
    }
  } finally {
    redis.disconnect();
  }
}

/** The organization's task rows once every transition so far is written (see recordsWritten). */
export async function taskCount(orgId: string): Promise<number> {
  await recordsWritten();
  return db().task.count({ where: { orgId } });
}

/** Polls the task row until it reaches a terminal status (or the timeout passes) and returns it. */
export async function waitTerminal(address: string, timeoutMs = 15_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const task = await db().task.findUnique({ where: { address } });
    if (task && ['completed', 'failed', 'cancelled', 'timed_out'].includes(task.status)) {
      return task;
    }
    if (Date.now() > deadline) {
      throw new Error(`task ${address} is still ${task?.status ?? 'missing'}`);
    }
    await sleep(50);
  }
}

/** Bounds a promise, so that a hang fails the test with a message instead of stalling the run. */
export async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms (a hang)`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
