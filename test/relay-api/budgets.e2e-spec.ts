import OpenAI from 'openai';
import { budgetMonth, createRedis, keys, nextMonthStart } from '@app/common';
import type { Redis } from 'ioredis';
import {
  ADMIN_TOKEN,
  REDIS_URL,
  closeDb,
  createDevice,
  createTenant,
  http,
  recordsWritten,
  sleep,
  startApi,
  startDevice,
  startDispatcher,
  taskCount,
  uniq,
} from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';
import { expectStatus } from '../support/expect-status';

/**
 * Monthly token budgets through the real api, dispatcher and a sim agent (issue 39): an org's and a
 * key's, refused with OpenAI's 429 `insufficient_quota` once the month's tokens reach them, shown in
 * `GET /v1/usage`, counted from Redis as tasks end (and raised to what Postgres counted when a budget
 * is set during the month), and overshot by requests in flight at most as docs/api.md, "Budgets", says.
 */
describe('monthly token budgets', () => {
  let api: Api;
  let dispatcher: Dispatcher;
  let device: Proc;
  let redis: Redis;
  const model = uniq('llama3.2:3b');
  /** The sim answers this prompt with the same tokens each time: 5 completion tokens at most. */
  const question = {
    model,
    messages: [{ role: 'user' as const, content: 'Count to ten slowly please' }],
    max_tokens: 5,
  };
  /** The tokens (prompt and completion) one such request uses, as the first answer's usage says. */
  let perRequest: number;

  /** The answer, once its status is the one expected (a failure prints its body). */
  const answered = async (pending: ReturnType<typeof http>, status: number) => {
    const res = await pending;
    expectStatus(res, status);
    return res;
  };
  const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };
  const bearer = (key: string) => ({ authorization: `Bearer ${key}` });
  const ask = (key: string) => http('POST', `${api.url}/v1/chat/completions`, { headers: bearer(key), body: question });
  const usage = async (key: string) =>
    (await answered(http('GET', `${api.url}/v1/usage`, { headers: bearer(key) }), 200)).body;
  const setOrgBudget = (tenant: Tenant, budget: number | null) =>
    answered(
      http('PATCH', `${api.url}/admin/orgs/${tenant.org.name}`, {
        headers: admin,
        body: { monthly_token_budget: budget },
      }),
      200,
    );
  const setKeyBudget = (keyId: string, budget: number | null) =>
    answered(
      http('PATCH', `${api.url}/admin/keys/${keyId}`, { headers: admin, body: { monthly_token_budget: budget } }),
      200,
    );

  /** Polls `GET /v1/usage` until `ready` holds for its budgets (a key lookup is cached for up to a second). */
  async function budgetsOnceThey(key: string, ready: (budgets: any) => boolean): Promise<any> {
    for (let i = 0; ; i++) {
      const { budgets } = await usage(key);
      if (ready(budgets)) {
        return budgets;
      }
      if (i === 100) {
        throw new Error(`the budgets never got there: ${JSON.stringify(budgets)}`);
      }
      await sleep(100);
    }
  }

  beforeAll(async () => {
    [api, dispatcher] = await Promise.all([startApi(), startDispatcher()]);
    redis = createRedis(REDIS_URL);
    const { token } = await createDevice();
    // The sim waits 300 ms before its first token: requests sent together overlap.
    device = await startDevice(dispatcher, token, { models: [model], ttftMs: 300 });
    const probe = await createTenant([model]);
    const first = await answered(ask(probe.key), 200);
    perRequest = first.body.usage.total_tokens;
    expect(perRequest).toBeGreaterThan(0);
  });

  afterAll(async () => {
    redis?.disconnect();
    await Promise.all([device?.stop(), api?.stop(), dispatcher?.stop()]);
    await closeDb();
  });

  it('an organization over its budget gets 429 insufficient_quota, as OpenAI words it, until the budget grows', async () => {
    const tenant = await createTenant([model]);
    // Used before the budget was set: counted once the budget exists, from Postgres.
    await answered(ask(tenant.key), 200);
    await recordsWritten();
    const set = await setOrgBudget(tenant, 2 * perRequest);
    expect(set.body.monthly_token_budget).toBe(2 * perRequest);
    const before = await budgetsOnceThey(tenant.key, (b) => b.org?.used === perRequest);
    expect(before).toEqual({
      month: budgetMonth(Date.now()),
      resets_at: nextMonthStart(Date.now()).toISOString(),
      org: { monthly_token_budget: 2 * perRequest, used: perRequest, remaining: perRequest },
      key: null,
    });

    await answered(ask(tenant.key), 200);
    await budgetsOnceThey(tenant.key, (b) => b.org.used === 2 * perRequest && b.org.remaining === 0);
    const tasks = await taskCount(tenant.org.id);

    const refused = await ask(tenant.key);
    expect(refused.status).toBe(429);
    expect(refused.body.error).toMatchObject({ code: 'insufficient_quota', type: 'insufficient_quota', param: null });
    expect(refused.body.error.message).toContain('organization’s monthly token budget');
    expect(refused.body.error.message).toContain(`resets at ${nextMonthStart(Date.now()).toISOString()}`);
    // The openai SDKs retry a 429 unless told not to.
    expect(refused.headers.get('x-should-retry')).toBe('false');
    const sdk = new OpenAI({ apiKey: tenant.key, baseURL: `${api.url}/v1` });
    await expect(sdk.chat.completions.create(question)).rejects.toMatchObject({
      status: 429,
      code: 'insufficient_quota',
    });
    // Refused before anything was queued.
    expect(await taskCount(tenant.org.id)).toBe(tasks);

    // A larger budget lets requests through again; none lifts it.
    await setOrgBudget(tenant, 3 * perRequest);
    await budgetsOnceThey(tenant.key, (b) => b.org.remaining === perRequest);
    await answered(ask(tenant.key), 200);
    await setOrgBudget(tenant, null);
    await budgetsOnceThey(tenant.key, (b) => b.org === null);
    await answered(ask(tenant.key), 200);
  });

  it("a key's own budget stops that key alone; a budget of 0 stops it at once", async () => {
    const tenant = await createTenant([model]);
    const other = await answered(
      http('POST', `${api.url}/admin/orgs/${tenant.org.name}/keys`, { headers: admin, body: { label: 'other' } }),
      201,
    );
    const set = await setKeyBudget(tenant.keyId, perRequest);
    expect(set.body).toMatchObject({ id: tenant.keyId, monthly_token_budget: perRequest });
    await budgetsOnceThey(tenant.key, (b) => b.key?.monthly_token_budget === perRequest);
    await answered(ask(tenant.key), 200);
    await budgetsOnceThey(tenant.key, (b) => b.key.remaining === 0);
    const refused = await ask(tenant.key);
    expect(refused.status).toBe(429);
    expect(refused.body.error.code).toBe('insufficient_quota');
    expect(refused.body.error.message).toContain('API key’s monthly token budget');
    // The org's other key has no budget of its own, and the org none: it goes on.
    await answered(ask(other.body.key), 200);
    expect((await usage(other.body.key)).budgets).toMatchObject({ org: null, key: null });
    // The list shows the budget.
    const listed = await answered(
      http('GET', `${api.url}/admin/orgs/${tenant.org.name}/keys`, { headers: admin }),
      200,
    );
    expect(listed.body.data.find((k: any) => k.id === tenant.keyId).monthly_token_budget).toBe(perRequest);

    await setKeyBudget(other.body.id, 0);
    await budgetsOnceThey(other.body.key, (b) => b.key?.monthly_token_budget === 0);
    expect((await ask(other.body.key)).body.error.code).toBe('insufficient_quota');
  });

  it('counts the month the tokens were used in: last month’s spend does not count against this one', async () => {
    const tenant = await createTenant([model]);
    const lastMonth = budgetMonth(Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth(), 0));
    await redis.set(keys.orgTokensSpent(tenant.org.id, lastMonth), 1_000_000_000, 'EX', 600);
    await setOrgBudget(tenant, 10 * perRequest);
    await budgetsOnceThey(tenant.key, (b) => b.org?.monthly_token_budget === 10 * perRequest);
    await answered(ask(tenant.key), 200);
    expect((await budgetsOnceThey(tenant.key, (b) => b.org.used > 0)).org.used).toBe(perRequest);
  });

  it('refuses budgets that are not whole numbers of tokens from 0, with 400 and nothing changed', async () => {
    const tenant = await createTenant([model]);
    for (const budget of [-1, 1.5, '100', 1e16]) {
      const res = await http('PATCH', `${api.url}/admin/orgs/${tenant.org.name}`, {
        headers: admin,
        body: { monthly_token_budget: budget },
      });
      expect([budget, res.status]).toEqual([budget, 400]);
      expect(res.body.error.param).toBe('monthly_token_budget');
    }
    const res = await http('PATCH', `${api.url}/admin/keys/${tenant.keyId}`, { headers: admin, body: {} });
    expect(res.status).toBe(400);
    const list = await answered(http('GET', `${api.url}/admin/orgs`, { headers: admin }), 200);
    expect(list.body.data.find((o: any) => o.name === tenant.org.name).monthly_token_budget).toBeNull();
  });

  it('requests in flight when a budget runs out take it past by at most concurrency × one request', async () => {
    const tenant = await createTenant([model]);
    const concurrency = 2;
    const budget = 100 * perRequest;
    await answered(
      http('PATCH', `${api.url}/admin/orgs/${tenant.org.name}`, {
        headers: admin,
        body: { monthly_token_budget: budget, concurrency },
      }),
      200,
    );
    // One token short of the budget: every request sent now is taken while the budget holds.
    await redis.set(keys.orgTokensSpent(tenant.org.id, budgetMonth(Date.now())), budget - 1, 'EX', 600);
    await budgetsOnceThey(tenant.key, (b) => b.org?.used === budget - 1);
    const answers = await Promise.all(Array.from({ length: 6 }, () => ask(tenant.key)));
    const ok = answers.filter((a) => a.status === 200).length;
    expect(ok).toBeGreaterThan(0);
    expect(ok).toBeLessThanOrEqual(concurrency);
    for (const refused of answers.filter((a) => a.status !== 200)) {
      expect([refused.status, refused.body.error.code]).toEqual([
        429,
        expect.stringMatching(/^(rate_limit_exceeded|insufficient_quota)$/),
      ]);
    }
    const after = await budgetsOnceThey(tenant.key, (b) => b.org.used === budget - 1 + ok * perRequest);
    expect(after.org.used - budget).toBeLessThanOrEqual(concurrency * perRequest);
    expect((await ask(tenant.key)).body.error.code).toBe('insufficient_quota');
  });
});
