import { randomUUID } from 'node:crypto';
import { AdminService, budgetMonth, nextMonthStart } from '@app/common';
import { cli, createDevice, createTenant, db, http, recordsWritten, uniq } from '../support/stack';
import type { Tenant } from '../support/stack';
import { adminAuth, assertOpenAIError, bearer, httpFrom, loopbackAddress } from '../foundation/helpers';
import { MESSAGES, Relay } from '../relay-api/helpers';
import { expectStatus } from '../support/expect-status';

/** A task row as the suite inserts it, with the values the report must add up. */
interface Row {
  orgId: string;
  apiKeyId: string | null;
  modelId: string;
  mode: 'direct' | 'network';
  kind: 'chat' | 'embedding';
  status: 'queued' | 'streaming' | 'completed' | 'failed' | 'cancelled' | 'timed_out';
  promptTokens: number | null;
  completionTokens: number | null;
  outputBytes: number | null;
  queuedAt: Date;
  ttft: number | null;
  duration: number | null;
}

const STATUS_ORDER = ['queued', 'assigned', 'streaming', 'completed', 'failed', 'cancelled', 'timed_out'];
const STATUSES: Row['status'][] = ['completed', 'completed', 'completed', 'failed', 'cancelled', 'timed_out', 'queued'];
/** The suite's own month, far from "now", so that only its rows are in it. */
const MONTH = '2030-05';
const BASE = Date.parse(`${MONTH}-01T00:00:00Z`);

/** percentile_cont: linear between the two nearest ranks, one decimal (as the API rounds). */
function percentile(values: number[], p: number): number | null {
  if (values.length === 0) {
    return null;
  }
  const v = [...values].sort((a, b) => a - b);
  const pos = p * (v.length - 1);
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return Math.round((v[lo] + (v[hi] - v[lo]) * (pos - lo)) * 10) / 10;
}

/**
 * GET /v1/usage, GET /admin/usage and `switchyard usage`: sums equal to the task rows, every grouping,
 * organizations kept apart, and bad parameters refused. Latencies are below 128 ms, where the
 * histograms keep whole milliseconds, so that the percentiles are exact.
 */
describe('usage reports', () => {
  const relay = new Relay();
  let a: Tenant;
  let b: Tenant;
  let secondKey: { id: string; prefix: string; label: string | null };
  const models = [uniq('usage-a'), uniq('usage-b')];
  const rows: Row[] = [];

  const usage = (key: string, query = '') => http('GET', `${relay.api.url}/v1/usage${query}`, { headers: bearer(key) });
  const adminUsage = (query = '') => http('GET', `${relay.api.url}/admin/usage${query}`, { headers: adminAuth() });

  /** The report the rows make, computed here from the rows alone. */
  function expected(orgId: string | null, groupBy: string[], from: number, to: number) {
    const keys = new Map([
      [a.keyId, { prefix: a.key.slice(0, 7), label: null as string | null }],
      [secondKey.id, { prefix: secondKey.prefix, label: secondKey.label }],
      [b.keyId, { prefix: b.key.slice(0, 7), label: null }],
    ]);
    const groups = new Map<string, { fields: Record<string, unknown>; rows: Row[]; order: unknown[] }>();
    for (const row of rows) {
      const t = row.queuedAt.getTime();
      if ((orgId !== null && row.orgId !== orgId) || t < from || t >= to) {
        continue;
      }
      const fields: Record<string, unknown> = {};
      const order: unknown[] = [];
      for (const g of groupBy) {
        if (g === 'model') {
          fields.model = row.modelId;
          order.push(row.modelId);
        } else if (g === 'key') {
          Object.assign(fields, {
            key: row.apiKeyId,
            key_prefix: row.apiKeyId ? keys.get(row.apiKeyId)!.prefix : null,
            key_label: row.apiKeyId ? keys.get(row.apiKeyId)!.label : null,
          });
          order.push(row.apiKeyId ?? '');
        } else if (g === 'day') {
          fields.day = row.queuedAt.toISOString().slice(0, 10);
          order.push(fields.day);
        } else if (g === 'hour') {
          fields.hour = new Date(Math.floor(t / 3_600_000) * 3_600_000).toISOString();
          order.push(fields.hour);
        } else if (g === 'mode') {
          fields.mode = row.mode;
          order.push(row.mode);
        } else if (g === 'kind') {
          fields.kind = row.kind;
          order.push(row.kind);
        } else if (g === 'status') {
          fields.status = row.status;
          order.push(STATUS_ORDER.indexOf(row.status));
        }
      }
      const id = JSON.stringify(fields);
      const group = groups.get(id) ?? { fields, rows: [], order };
      group.rows.push(row);
      groups.set(id, group);
    }
    const compare = (x: unknown[], y: unknown[]) => {
      for (let i = 0; i < x.length; i++) {
        if (x[i] !== y[i]) {
          return (x[i] as number | string) < (y[i] as number | string) ? -1 : 1;
        }
      }
      return 0;
    };
    return [...groups.values()]
      .sort((x, y) => compare(x.order, y.order))
      .map(({ fields, rows: rs }) => {
        const count = (s: string) => rs.filter((r) => r.status === s).length;
        const sum = (f: (r: Row) => number | null) => rs.reduce((n, r) => n + (f(r) ?? 0), 0);
        const done = rs.filter((r) => r.status === 'completed');
        const ttft = done.flatMap((r) => (r.ttft === null ? [] : [r.ttft]));
        const duration = done.flatMap((r) => (r.duration === null ? [] : [r.duration]));
        return {
          ...fields,
          requests: rs.length,
          completed: count('completed'),
          failed: count('failed'),
          cancelled: count('cancelled'),
          timed_out: count('timed_out'),
          prompt_tokens: sum((r) => r.promptTokens),
          completion_tokens: sum((r) => r.completionTokens),
          output_bytes: sum((r) => r.outputBytes),
          ttft_ms: { p50: percentile(ttft, 0.5), p95: percentile(ttft, 0.95) },
          duration_ms: { p50: percentile(duration, 0.5), p95: percentile(duration, 0.95) },
        };
      });
  }

  beforeAll(async () => {
    await relay.start();
    [a, b] = await Promise.all([createTenant(models), createTenant(models)]);
    const key = await new AdminService(db()).keys.create({ org: a.org.name, label: 'second' });
    secondKey = { id: key.id, prefix: key.prefix, label: key.label };
    for (let i = 0; i < 90; i++) {
      const org = i % 6 === 5 ? b : a;
      const status = STATUSES[i % STATUSES.length];
      const ttft = status === 'queued' || i % 11 === 0 ? null : 5 + ((i * 37) % 100);
      rows.push({
        orgId: org.org.id,
        apiKeyId: org === b ? b.keyId : [a.keyId, secondKey.id, null][i % 3],
        modelId: models[i % 2],
        mode: i % 4 === 0 ? 'direct' : 'network',
        kind: i % 5 === 0 ? 'embedding' : 'chat',
        status,
        promptTokens: i % 9 === 0 ? null : i * 3,
        completionTokens: i % 10 === 0 ? null : i * 5,
        outputBytes: i % 4 === 1 ? null : i * 11,
        queuedAt: new Date(BASE + (i % 5) * 86_400_000 + (i % 7) * 3_600_000 + i * 61_000),
        ttft,
        duration: status === 'queued' || status === 'streaming' ? null : (ttft ?? 0) + ((i * 13) % 20),
      });
    }
    // In two statements, as a writer would batch them.
    for (const part of [rows.slice(0, 45), rows.slice(45)]) {
      await db().task.createMany({
        data: part.map((r) => {
          const id = randomUUID();
          return {
            id,
            address: `network:${id}`,
            orgId: r.orgId,
            apiKeyId: r.apiKeyId,
            modelId: r.modelId,
            mode: r.mode,
            kind: r.kind,
            api: 'openai' as const,
            stream: false,
            status: r.status,
            promptTokens: r.promptTokens,
            completionTokens: r.completionTokens,
            outputBytes: r.outputBytes === null ? null : BigInt(r.outputBytes),
            queuedAt: r.queuedAt,
            firstTokenAt: r.ttft === null ? null : new Date(r.queuedAt.getTime() + r.ttft),
            finishedAt: r.duration === null ? null : new Date(r.queuedAt.getTime() + r.duration),
          };
        }),
      });
    }
  });

  afterAll(() => relay.stop());

  const MONTH_RANGE = `from=${MONTH}-01&to=2030-06-01`;

  test.each([
    '',
    'model',
    'key',
    'day',
    'hour',
    'mode',
    'kind',
    'status',
    'model,day',
    'status,key',
    'day,mode,model',
    'model,kind',
  ])('GET /v1/usage?group_by=%s adds up the caller’s task rows exactly', async (groupBy) => {
    const res = await usage(a.key, `?${MONTH_RANGE}&group_by=${groupBy}`);
    expectStatus(res, 200);
    expect(res.body).toEqual({
      object: 'list',
      from: `${MONTH}-01T00:00:00.000Z`,
      to: '2030-06-01T00:00:00.000Z',
      group_by: groupBy ? groupBy.split(',') : [],
      data: expected(a.org.id, groupBy ? groupBy.split(',') : [], BASE, Date.parse('2030-06-01T00:00:00Z')),
      // This month's budgets, whatever the range: the org and its key have none.
      budgets: {
        month: budgetMonth(Date.now()),
        resets_at: nextMonthStart(Date.now()).toISOString(),
        org: null,
        key: null,
      },
    });
  });

  test('ranges that cut hours and days, with zones: the rows inside, nothing else', async () => {
    const from = '2030-05-02T03:30:00+02:00';
    const to = '2030-05-04T05:10:00Z';
    const res = await usage(a.key, `?from=${encodeURIComponent(from)}&to=${to}&group_by=day,model`);
    expectStatus(res, 200);
    expect(res.body.from).toBe('2030-05-02T01:30:00.000Z');
    expect(res.body.data).toEqual(expected(a.org.id, ['day', 'model'], Date.parse(from), Date.parse(to)));
    const empty = await usage(a.key, `?from=2030-05-02T01:00:00Z&to=2030-05-02T01:00:00Z`);
    expect(empty.body.data).toEqual([]);
  });

  test('organizations are kept apart: /v1/usage shows the caller’s own tasks only; /admin/usage any or all', async () => {
    const [ofA, ofB] = await Promise.all([
      usage(a.key, `?${MONTH_RANGE}&group_by=key`),
      usage(b.key, `?${MONTH_RANGE}&group_by=key`),
    ]);
    expect(ofB.body.data).toEqual(expected(b.org.id, ['key'], BASE, Date.parse('2030-06-01')));
    expect(ofB.body.data.map((r: any) => r.key)).toEqual([b.keyId]);
    expect(ofA.text).not.toContain(b.keyId);
    const admin = await adminUsage(`?${MONTH_RANGE}&org=${b.org.name}&group_by=model`);
    expectStatus(admin, 200);
    expect(admin.body.data).toEqual(expected(b.org.id, ['model'], BASE, Date.parse('2030-06-01')));
    const all = await adminUsage(`?${MONTH_RANGE}&group_by=org`);
    expect(all.body.data.map((r: any) => [r.org, r.requests])).toEqual(
      [a, b]
        .map((t) => [t.org.name, rows.filter((r) => r.orgId === t.org.id).length])
        .sort((x, y) => String(x[0]).localeCompare(String(y[0]))),
    );
    const everything = await adminUsage(`?${MONTH_RANGE}&group_by=mode,status`);
    expect(everything.body.data).toEqual(expected(null, ['mode', 'status'], BASE, Date.parse('2030-06-01')));
  });

  test('who may ask: a key for /v1/usage, the admin token for /admin/usage; org must exist', async () => {
    // From an address of its own: failed authentications are counted per client address.
    const from = loopbackAddress();
    assertOpenAIError(await httpFrom(from, 'GET', `${relay.api.url}/v1/usage`), 401, 'invalid_api_key');
    assertOpenAIError(await httpFrom(from, 'GET', `${relay.api.url}/v1/usage`, adminAuth()), 401, 'invalid_api_key');
    assertOpenAIError(
      await httpFrom(from, 'GET', `${relay.api.url}/admin/usage`, bearer(a.key)),
      401,
      'invalid_admin_token',
    );
    assertOpenAIError(await adminUsage(`?org=${uniq('nobody')}`), 404, 'org_not_found', 'org');
    assertOpenAIError(await adminUsage('?org=bad%20name'), 400, 'invalid_request', 'org');
    // A tenant cannot pick another organization, or group by organization.
    assertOpenAIError(await usage(a.key, `?org=${b.org.name}`), 400, 'invalid_request', 'org');
    assertOpenAIError(await usage(a.key, '?group_by=org'), 400, 'invalid_request', 'group_by');
  });

  test.each([
    ['?from=yesterday', 'from'],
    ['?from=2030-02-30', 'from'],
    ['?to=2030-05-01T10:00:00', 'to'],
    ['?to=1700000000', 'to'],
    ['?from=2030-06-01&to=2030-05-01', 'from'],
    ['?from=2029-01-01&to=2030-05-01', 'to'],
    ['?group_by=model,region', 'group_by'],
    ['?group_by=model,', 'group_by'],
    ['?limit=10', 'limit'],
    ['?from=2030-05-01&from=2030-05-02', 'from'],
  ])('GET /v1/usage%s is 400 invalid_request naming %s', async (query, param) => {
    const res = await usage(a.key, query);
    const error = assertOpenAIError(res, 400, 'invalid_request', param);
    expect(error.message).toMatch(new RegExp(param));
    const admin = await adminUsage(query);
    assertOpenAIError(admin, 400, 'invalid_request', param);
  });

  test('switchyard usage: the admin report as a table, and with --json the same object as /admin/usage', async () => {
    const by = 'model,kind,status';
    const args = ['usage', '--org', a.org.name, '--from', `${MONTH}-01`, '--to', '2030-06-01', '--by', by];
    const [json, human, http] = await Promise.all([
      cli(['--json', ...args]),
      cli(args),
      adminUsage(`?${MONTH_RANGE}&org=${a.org.name}&group_by=${by}`),
    ]);
    expect({ code: json.code, stderr: json.stderr }).toEqual(expect.objectContaining({ code: 0 }));
    expect(JSON.parse(json.stdout)).toEqual(http.body);
    expect({ code: human.code, stderr: human.stderr }).toEqual(expect.objectContaining({ code: 0 }));
    const [header, ...lines] = human.stdout.trimEnd().split('\n');
    expect(header.split(/\s{2,}/)).toEqual([
      'MODEL',
      'KIND',
      'STATUS',
      'REQUESTS',
      'COMPLETED',
      'FAILED',
      'CANCELLED',
      'TIMED_OUT',
      'PROMPT_TOKENS',
      'COMPLETION_TOKENS',
      'OUTPUT_BYTES',
      'TTFT_P50_MS',
      'TTFT_P95_MS',
      'DURATION_P50_MS',
      'DURATION_P95_MS',
    ]);
    expect(lines.length).toBe(http.body.data.length);
    const bad = await cli(['--json', 'usage', '--by', 'region']);
    expect(bad.code).toBe(1);
    expect(JSON.parse(bad.stderr).error.param).toBe('group_by');
  });

  test('task records say who counted their usage: usage.source on /v1/tasks and /admin/tasks', async () => {
    const insert = async (usageSource: string | null, promptTokens: number | null) => {
      const id = randomUUID();
      await db().task.create({
        data: {
          id,
          address: `network:${id}`,
          orgId: a.org.id,
          modelId: models[0],
          mode: 'network',
          api: 'openai',
          stream: true,
          status: 'cancelled',
          promptTokens,
          completionTokens: promptTokens === null ? null : 4,
          outputBytes: promptTokens === null ? null : 17n,
          usageSource,
          queuedAt: new Date('2031-01-05T00:00:00Z'),
        },
      });
      return `network:${id}`;
    };
    const [relayed, unknown, none] = await Promise.all([insert('relay', 9), insert(null, 2), insert(null, null)]);
    const own = (address: string) => http('GET', `${relay.api.url}/v1/tasks/${address}`, { headers: bearer(a.key) });
    const viaAdmin = (address: string) =>
      http('GET', `${relay.api.url}/admin/tasks/${address}`, { headers: adminAuth() });
    for (const res of [await own(relayed), await viaAdmin(relayed)]) {
      expectStatus(res, 200);
      expect(res.body.usage).toEqual({ prompt_tokens: 9, completion_tokens: 4, total_tokens: 13, source: 'relay' });
      expect(res.body.kind).toBe('chat');
    }
    // A record that does not say (written before usage_source was kept) shows its usage as before.
    expect((await own(unknown)).body.usage).toEqual({ prompt_tokens: 2, completion_tokens: 4, total_tokens: 6 });
    expect((await viaAdmin(none)).body.usage).toBeNull();
  });

  test('real requests: the current month by default, counted from the task rows the relay wrote', async () => {
    const device = await createDevice();
    await relay.device(device.token, { models: [models[0]], tokens: 6 });
    const client = relay.client(a.key);
    for (let i = 0; i < 3; i++) {
      await client.chat.completions.create({ model: models[0], messages: [...MESSAGES] });
    }
    // The task rows are written behind the answers: once every record so far is in Postgres.
    await recordsWritten();
    // This month's rows (the fixture rows of the suite are in 2030).
    const now = new Date();
    const month = { gte: new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1)), lt: new Date(BASE) };
    const tasks = await db().task.findMany({ where: { orgId: a.org.id, queuedAt: month } });
    expect(tasks.map((t) => t.status)).toEqual(['completed', 'completed', 'completed']);
    expect(tasks).toHaveLength(3);
    const res = await usage(a.key, '?group_by=model');
    expectStatus(res, 200);
    expect(res.body.from).toBe(new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1)).toISOString());
    const row = res.body.data.find((r: any) => r.model === models[0]);
    expect([row.requests, row.completed, row.prompt_tokens, row.completion_tokens]).toEqual([
      3,
      3,
      tasks.reduce((n, t) => n + (t.promptTokens ?? 0), 0),
      tasks.reduce((n, t) => n + (t.completionTokens ?? 0), 0),
    ]);
    expect(typeof row.ttft_ms.p50).toBe('number');
    expect(typeof row.duration_ms.p95).toBe('number');
  });
});
