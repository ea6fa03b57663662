import { appendFileSync } from 'node:fs';
import { join } from 'node:path';
import { createRedis, decodePresenceMember, sha256Hex, KeySpace } from '@app/common';
import {
  REDIS_URL,
  baseEnv,
  db,
  ensureCatalog,
  http,
  recordsWritten,
  sleep,
  startNode,
  waitOnline,
} from '../../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../../support/stack';
import { waitStatus as waitStatusOf } from '../../reliability/helpers';

export interface RuntimeDeviceOptions {
  backend: 'ollama' | 'openai';
  upstream: string;
  /** `--model` values (`public=upstream` or plain); none = discovery. */
  models?: string[];
  /** Public ids to wait for before returning (default: the public side of `models`). */
  online?: string[];
  /** Short by default so that tests see changes quickly. */
  discoveryIntervalMs?: number;
  healthIntervalMs?: number;
  extraArgs?: string[];
  pool?: string;
  /** Environment variables of the agent's process beside the harness's (OTEL_EXPORTER_OTLP_ENDPOINT, …). */
  env?: Record<string, string>;
}

/**
 * Starts a real device agent with the ollama or openai backend (the harness's startDevice always uses
 * sim) and waits until the dispatcher has it online for the given models.
 */
export async function startRuntimeDevice(
  dispatcher: Dispatcher | { url: string },
  token: string,
  opts: RuntimeDeviceOptions,
): Promise<Proc> {
  const args = ['--server', dispatcher.url, '--token', token, '--backend', opts.backend, '--upstream', opts.upstream];
  args.push('--log-level', 'info');
  args.push('--discovery-interval-ms', String(opts.discoveryIntervalMs ?? 300));
  args.push('--health-interval-ms', String(opts.healthIntervalMs ?? 200));
  for (const model of opts.models ?? []) {
    args.push('--model', model);
  }
  args.push(...(opts.extraArgs ?? []));
  await ensureCatalog(opts.online ?? (opts.models ?? []).map((m) => m.split('=')[0]));
  const proc = startNode('apps/device/src/main.js', args, baseEnv(opts.env));
  if (process.env.DEVICE_TEST_LOG_DIR) {
    // For debugging a failed run: each agent's output in a file of its own.
    const file = join(process.env.DEVICE_TEST_LOG_DIR, `device-${proc.child.pid}.log`);
    proc.child.stdout?.on('data', (d: Buffer) => appendFileSync(file, d));
    proc.child.stderr?.on('data', (d: Buffer) => appendFileSync(file, d));
  }
  const online = opts.online ?? (opts.models ?? []).map((m) => m.split('=')[0]);
  if (online.length > 0) {
    await waitOnline(online, token, { pool: opts.pool, proc });
  }
  return proc;
}

export const completionsUrl = (api: Api) => `${api.url}/v1/chat/completions`;

/** A non-streamed chat completion. */
export function chat(api: Api, tenant: Tenant, body: Record<string, unknown>) {
  return http('POST', completionsUrl(api), {
    headers: { authorization: `Bearer ${tenant.key}` },
    body: { messages: [{ role: 'user', content: 'hello' }], ...body },
  });
}

/** Retries a request until `accept` holds (a change takes up to a poll interval to reach the dispatcher). */
export async function eventually<T>(
  attempt: () => Promise<T>,
  accept: (value: T) => boolean,
  what: string,
  timeoutMs = 15_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await attempt();
    if (accept(value)) {
      return value;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}; last: ${JSON.stringify(value)}`);
    }
    await sleep(100);
  }
}

/** The task row of a response's task_address (or of the org's latest task). */
export async function taskRow(tenant: Tenant, address?: string) {
  await recordsWritten();
  if (address) {
    return db().task.findUniqueOrThrow({ where: { address } });
  }
  return db().task.findFirstOrThrow({ where: { orgId: tenant.org.id }, orderBy: { queuedAt: 'desc' } });
}

/** Waits for the org's latest task to reach `status`. */
export function waitStatus(tenant: Tenant, status: string, timeoutMs = 10_000) {
  return waitStatusOf(tenant.org.id, status, timeoutMs);
}

/** The agent's JSON log lines. */
export function logLines(proc: Proc): Record<string, unknown>[] {
  return proc.stdout
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/**
 * Waits until the device's published presence for a model (what the api routes by) has features that
 * satisfy `accept`. Requests sent before that may be queued for features the device no longer declares.
 */
export async function waitFeatures(
  token: string,
  model: string,
  accept: (features: string[]) => boolean,
  pool = 'network',
  timeoutMs = 15_000,
): Promise<string[]> {
  const device = await db().device.findUniqueOrThrow({ where: { tokenHash: sha256Hex(token) } });
  const redis = createRedis(REDIS_URL);
  try {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const members = await redis.zrangebyscore(KeySpace.of(redis).presence(pool, model), Date.now(), '+inf');
      const mine = members.map(decodePresenceMember).find((m) => m.deviceId === device.id);
      if (mine && accept(mine.features)) {
        return mine.features;
      }
      if (Date.now() > deadline) {
        throw new Error(`the device's features for ${model} are ${JSON.stringify(mine?.features ?? null)}`);
      }
      await sleep(25);
    }
  } finally {
    redis.disconnect();
  }
}

/** Waits until the device's presence for a model is gone (it withdrew the model, or became unavailable). */
export async function waitOffline(token: string, model: string, pool = 'network', timeoutMs = 15_000): Promise<void> {
  const device = await db().device.findUniqueOrThrow({ where: { tokenHash: sha256Hex(token) } });
  const redis = createRedis(REDIS_URL);
  try {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const members = await redis.zrangebyscore(KeySpace.of(redis).presence(pool, model), Date.now(), '+inf');
      if (!members.some((m) => decodePresenceMember(m).deviceId === device.id)) {
        return;
      }
      if (Date.now() > deadline) {
        throw new Error(`the device is still online for ${model}`);
      }
      await sleep(25);
    }
  } finally {
    redis.disconnect();
  }
}
