import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { request } from 'node:http';
import { ADMIN_TOKEN, db } from '../support/stack';
import type { Api } from '../support/stack';

/** Shared assertions and fixtures of the foundation suites (issue 2). */

export const API_KEY_FORMAT = /^sy_[0-9A-Za-z]{32,}$/;
export const DEVICE_TOKEN_FORMAT = /^syd_[0-9A-Za-z]{32,}$/;
export const UUID_FORMAT = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export const sha256 = (value: string) => createHash('sha256').update(value).digest('hex');

export const adminAuth = (token: string = ADMIN_TOKEN) => ({ authorization: `Bearer ${token}` });
export const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

/** A well-formed API key that no organization owns. */
export function unknownKey(): string {
  const base62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
  return 'sy_' + Array.from(randomBytes(40), (b) => base62[b % 62]).join('');
}

/** A model id as it goes into a URL path: `/` as %2F, everything else as is. */
export const modelPath = (id: string) => id.replaceAll('/', '%2F');

export interface OpenAIErrorFields {
  message: string;
  type: string;
  param: string | null;
  code: string;
}

/** Asserts OpenAI's error shape `{"error":{"message","type","param","code"}}` and returns the error. */
export function assertOpenAIError(
  res: { status: number; body: unknown; text: string },
  status: number,
  code: string,
  param?: string | null,
): OpenAIErrorFields {
  expect({ status: res.status, message: `expected ${status} ${code}, got ${res.status}: ${res.text}` }).toEqual(
    expect.objectContaining({ status }),
  );
  if (!(res.body && typeof res.body === 'object')) {
    throw new Error(`not a JSON object: ${res.text}`);
  }
  expect(Object.keys(res.body)).toEqual(['error']);
  const error = (res.body as { error: OpenAIErrorFields }).error;
  expect(Object.keys(error).sort()).toEqual(['code', 'message', 'param', 'type']);
  expect({ code: error.code, body: res.text }).toEqual(expect.objectContaining({ code }));
  expect(typeof error.message).toBe('string');
  // empty error message
  expect(error.message.length).toBeGreaterThan(0);
  expect(typeof error.type).toBe('string');
  expect({ ok: error.param === null || typeof error.param === 'string', body: res.text }).toEqual(
    expect.objectContaining({ ok: true }),
  );
  if (param !== undefined) {
    expect({ param: error.param, body: res.text }).toEqual(expect.objectContaining({ param }));
  }
  return error;
}

/** Whether any column of any row of a table holds the text (keys and tokens must never be stored). */
export async function tableContains(table: 'api_keys' | 'devices', text: string): Promise<boolean> {
  const rows = await db().$queryRawUnsafe<{ n: number }[]>(
    `SELECT count(*)::int AS n FROM ${table} t WHERE strpos(row_to_json(t)::text, $1) > 0`,
    text,
  );
  return rows[0].n > 0;
}

/** A finished task row, inserted directly (tasks are created by requests from the next issue on). */
export async function insertTask(orgId: string, modelId: string) {
  const id = randomUUID();
  const address = `network:${id}`;
  await db().task.create({
    data: { id, address, orgId, modelId, mode: 'network', api: 'openai', stream: false, status: 'completed' },
  });
  return { id, address };
}

/** Parses `key  value` lines of the CLI's human output for one record. */
export function humanRecord(stdout: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of stdout.split('\n')) {
    const match = /^(\S+)\s+(.*)$/.exec(line);
    if (match) {
      out[match[1]] = match[2].trim();
    }
  }
  return out;
}

/** Runs the jobs with at most `limit` at a time (the CLI is CPU-heavy; the machine is small), keeping order. */
export async function inBatches<T>(jobs: (() => Promise<T>)[], limit = 2): Promise<T[]> {
  const results: T[] = new Array(jobs.length);
  let next = 0;
  const worker = async () => {
    while (next < jobs.length) {
      const i = next++;
      results[i] = await jobs[i]();
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, jobs.length) }, worker));
  return results;
}

/** Stops the apis; one that died during the suite is reported with its output (it explains the failures). */
export async function stopApis(...apis: (Api | undefined)[]): Promise<void> {
  await Promise.all(
    apis.map(async (api) => {
      if (!api) {
        return;
      }
      const { exitCode, signalCode } = api.proc.child;
      if (exitCode !== null || signalCode !== null) {
        process.stderr.write(
          `api on ${api.url} had died (exit ${exitCode}, signal ${signalCode}):\n${api.proc.output}\n`,
        );
      }
      await api.stop();
    }),
  );
}

/**
 * A loopback address of its own (127.x.y.z) for a suite's client requests. The api counts failed
 * authentications per client address (30 a minute, in Redis, across every api of the test run) and
 * then answers failing keys from that address with 429; a suite that provokes 401s on purpose uses
 * an address of its own so that it neither suffers from nor causes another suite's 429s.
 */
export function loopbackAddress(): string {
  const b = randomBytes(3);
  return `127.${(b[0] % 254) + 1}.${b[1]}.${(b[2] % 254) + 1}`;
}

/** Like the harness's http(), but sent from the given local address. */
export function httpFrom(
  localAddress: string,
  method: string,
  url: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: any; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method, headers, localAddress }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => {
        let body: unknown = undefined;
        try {
          body = text ? JSON.parse(text) : undefined;
        } catch {
          body = undefined;
        }
        resolve({ status: res.statusCode ?? 0, body, text });
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}
