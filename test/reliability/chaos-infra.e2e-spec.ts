import { createRedis, KeySpace, SINGLE_LAYOUT } from '@app/common';
import { closeDb, createDevice, createTenant, db, http, sleep, uniq } from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';
import {
  LiveStream,
  RedisServer,
  TERMINAL,
  TcpProxy,
  adminAuth,
  assertStreamEnded,
  assertOllamaError,
  assertOpenAIError,
  bearer,
  chatBody,
  databaseTarget,
  databaseUrlVia,
  jsonHttp,
  loopbackAddress,
  startApi,
  startDevice,
  startDispatcher,
  stopAll,
  waitAllTerminal,
  waitStatus,
  waitTasks,
  within,
} from './helpers';
import { expectStatus } from '../support/expect-status';

/** Every sim device of this suite writes replies of this many tokens. */
const TOKENS = 12;
/**
 * While a dependency is down the api answers instead of holding requests until it comes back: a
 * bound far above a normal answer and far below the queue and stream timeouts of this suite, so that
 * a loaded machine does not break it while a request held back by the outage would.
 */
const QUICKLY_MS = 8_000;

/** A timed request: the response and how long it took. */
async function timed<T>(fn: () => Promise<T>): Promise<[T, number]> {
  const started = Date.now();
  const result = await fn();
  return [result, Date.now() - started];
}

/** The log lines of some processes that mention a string (a task address), for failure messages. */
function logsAbout(needle: string, ...procs: { proc: Proc }[]): string {
  return procs
    .flatMap((p) => p.proc.output.split('\n'))
    .filter((l) => l.includes(needle) || l.includes('"msg":"done failed"'))
    .map((l) => {
      try {
        const entry = JSON.parse(l);
        return `${entry.service}: ${entry.msg}${entry.err ? ` (${String(entry.err.message).slice(0, 120)})` : ''}`;
      } catch {
        return l.slice(0, 300);
      }
    })
    .join('\n');
}

/** Each task row is terminal and consistent with its status. */
function assertConsistent(rows: Awaited<ReturnType<typeof waitAllTerminal>>): void {
  for (const row of rows) {
    const what = `${row.address} ${row.status} ${row.errorCode ?? ''}`;
    expect({ ok: TERMINAL.includes(row.status), what }).toEqual(expect.objectContaining({ ok: true }));
    expect({ ok: Boolean(row.finishedAt), message: `${what}: no finished_at` }).toEqual(
      expect.objectContaining({ ok: true }),
    );
    if (row.status === 'completed') {
      expect({
        ok: Boolean(row.outputSha256 && row.finishReason),
        message: `${what}: completed without hash or finish reason`,
      }).toEqual(expect.objectContaining({ ok: true }));
      expect({ errorCode: row.errorCode, what }).toEqual(expect.objectContaining({ errorCode: null }));
    } else {
      expect({ ok: Boolean(row.errorCode), message: `${what}: no error code` }).toEqual(
        expect.objectContaining({ ok: true }),
      );
    }
  }
}

/**
 * Chaos in the dependencies: Redis restarted without persistence (everything in it lost) and down
 * for longer than BullMQ's drain delay, and Postgres unreachable for a few seconds. Requests fail
 * quickly and cleanly while a dependency is gone, what was in flight ends with a whole answer or an
 * explicit error, no task row stays open or inconsistent, and the system serves again by itself.
 */
describe('chaos: Redis and Postgres', () => {
  const devices: Proc[] = [];
  const servers: { proc: Proc }[] = [];
  const extra: { stop(): Promise<unknown> }[] = [];

  /** The stack on a redis-server of its own. */
  const r = {} as { redis: RedisServer; api: Api; dispatcher: Dispatcher; model: string; tenant: Tenant };
  /** The stack whose Postgres goes through a proxy that the test cuts. */
  const p = {} as { proxy: TcpProxy; api: Api; dispatcher: Dispatcher; model: string; tenant: Tenant };

  beforeAll(async () => {
    // Both stacks start together (startup is the slow part on a busy machine).
    await Promise.all([
      (async () => {
        r.redis = await RedisServer.start();
        extra.push(r.redis);
        const env = {
          REDIS_URL: r.redis.url,
          QUEUE_TIMEOUT_MS: '5000',
          TASK_IDLE_TIMEOUT_MS: '5000',
          MAX_STREAM_MS: '15000',
          LOG_LEVEL: 'info',
        };
        [r.api, r.dispatcher] = await Promise.all([startApi(env), startDispatcher(env)]);
        servers.push(r.api, r.dispatcher);
        Object.assign(r, await stackTenant(r.dispatcher, r.redis.url, 3));
      })(),
      (async () => {
        const target = databaseTarget();
        p.proxy = await TcpProxy.start(target.host, target.port);
        extra.push(p.proxy);
        const env = {
          DATABASE_URL: databaseUrlVia(p.proxy.port),
          QUEUE_TIMEOUT_MS: '10000',
          TASK_IDLE_TIMEOUT_MS: '5000',
          LOG_LEVEL: 'info',
        };
        [p.api, p.dispatcher] = await Promise.all([startApi(env), startDispatcher(env)]);
        servers.push(p.api, p.dispatcher);
        Object.assign(p, await stackTenant(p.dispatcher, undefined, 6));
      })(),
    ]);
  });

  afterAll(async () => {
    await stopAll(devices, servers, extra);
    await closeDb();
  });

  /** A tenant with one model, served by one sim device on the given dispatcher. */
  async function stackTenant(dispatcher: Dispatcher, redisUrl: string | undefined, tokensPerSecond: number) {
    const model = uniq('infra');
    const tenant = await createTenant([model]);
    const { token } = await createDevice();
    devices.push(
      await startDevice(dispatcher.url, token, { models: [model], tokens: TOKENS, tokensPerSecond }, { redisUrl }),
    );
    return { model, tenant };
  }

  const chat = (api: Api, tenant: Tenant, model: string, content: string) =>
    jsonHttp('POST', `${api.url}/v1/chat/completions`, chatBody(model, content), {
      headers: bearer(tenant.key),
      timeoutMs: 45_000,
    });

  describe('Redis', () => {
    /** Until 200 (the dispatcher renews its devices' presence every 5 s after a restart). */
    async function untilServed(content: string) {
      const deadline = Date.now() + 30_000;
      let res = await chat(r.api, r.tenant, r.model, content);
      while (res.status !== 200 && Date.now() < deadline) {
        assertOpenAIError(res, 503);
        await sleep(500);
        res = await chat(r.api, r.tenant, r.model, content);
      }
      expect({ status: res.status, message: `the system did not recover: ${res.text}` }).toEqual(
        expect.objectContaining({ status: 200 }),
      );
      return res;
    }

    it('a short Redis restart in the middle of a stream: the answer arrives whole, or ends with an explicit error', async () => {
      const { api, dispatcher, tenant, model, redis } = r;
      await untilServed('before the blip');
      const prompt = 'streams through a blip';
      const live = new LiveStream(
        `${api.url}/v1/chat/completions`,
        tenant.key,
        chatBody(model, prompt, { stream: true }),
      );
      await live.waitFor(/"content":"[^"]+"/);
      await redis.kill();
      await sleep(1_000);
      await redis.start();
      // From the stream itself: the row may not be written yet (records are written behind).
      const address = live.events[0].task_address as string;
      await within(live.done, 22_000, 'the stream in flight').catch((error: Error) => {
        live.abort();
        throw new Error(
          `${error.message}; the client got:\n${live.text.slice(-600)}\nlogs:\n${logsAbout(address, api, dispatcher)}`,
        );
      });
      const reference = await untilServed(prompt);
      const row = (await waitAllTerminal(tenant.org.id, 30_000)).find((t) => t.address === address)!;
      try {
        assertStreamEnded(live, reference.body.choices[0].message.content);
      } catch (error) {
        throw new Error(
          `${(error as Error).message}\nthe task ended ${row.status}; logs:\n${logsAbout(address, api, dispatcher)}`,
        );
      }
    });

    /**
     * A stream in flight on the Redis stack, with the direct access to its task stream that the
     * forgery tests need: they write there what a failure would leave.
     */
    async function streamInFlight(prompt: string) {
      const { api, tenant, model, redis } = r;
      const reference = (await untilServed(prompt)).body.choices[0].message.content as string;
      const live = new LiveStream(
        `${api.url}/v1/chat/completions`,
        tenant.key,
        chatBody(model, prompt, { stream: true }),
      );
      await live.waitFor(/"content":"[^"]+"/);
      const row = await waitStatus(tenant.org.id, 'streaming', 10_000, { stream: true });
      const key = KeySpace.for(SINGLE_LAYOUT).taskStream(row.id);
      return {
        live,
        row,
        reference,
        /** Runs `fn` with a connection to the test's Redis and the task stream's key. */
        async forge(fn: (conn: ReturnType<typeof createRedis>, key: string, attempt: number) => Promise<void>) {
          const conn = createRedis(redis.url);
          try {
            const [[, fields]] = await conn.xrange(key, '-', '+', 'COUNT', 1);
            await fn(conn, key, Number(fields[fields.indexOf('a') + 1]));
          } finally {
            conn.disconnect();
          }
        },
        /** The client got an explicit error with this code, the row failed with it, the device serves again. */
        async endsWith(code: string, forged: RegExp) {
          await within(live.done, 15_000, `the stream ending with ${code}`);
          expect(assertStreamEnded(live, reference)).toBe('error');
          expect(live.events.at(-1).error.code).toBe(code);
          expect(live.text).not.toMatch(forged);
          const [ended] = await waitTasks(
            { id: row.id },
            (rows) => rows.length === 1 && TERMINAL.includes(rows[0].status),
            15_000,
            'the task to end',
          );
          expect(ended.status).toBe('failed');
          expect(ended.errorCode).toBe(code);
          await untilServed(`after ${code}`);
        },
      };
    }

    it('entries written twice are relayed once; a lost entry ends the request with relay_interrupted', async () => {
      const flight = await streamInFlight('streams past forged entries');
      await flight.forge(async (conn, key, attempt) => {
        // What a write retried after a lost reply leaves: the same events again.
        for (const [, fields] of await conn.xrange(key, '-', '+')) {
          await conn.xadd(key, '*', ...fields);
        }
        const seen = flight.live.text.length;
        await flight.live.waitFor(new RegExp(`^[\\s\\S]{${seen}}[\\s\\S]*"content":"[^"]+"`));
        // What an outage without persistence leaves: events missing before the next entry.
        const forged = [{ type: 'delta', choices: [{ index: 0, content: 'FORGED' }] }];
        await conn.xadd(key, '*', 'a', String(attempt), 's', '100000', 'e', JSON.stringify(forged));
      });
      await flight.endsWith('relay_interrupted', /FORGED/);
    });

    it('output from a later attempt after some was relayed: the request ends with device_disconnected', async () => {
      const flight = await streamInFlight('streams when another attempt shows up');
      await flight.forge(async (conn, key, attempt) => {
        // What a second dispatcher would write had it claimed the job again (a stalled job whose
        // first token was not yet recorded): its own assignment, counting from 0.
        const events = [
          { type: 'assigned', device_id: flight.row.deviceId, attempt: attempt + 1 },
          { type: 'delta', choices: [{ index: 0, content: 'SECOND' }] },
        ];
        await conn.xadd(key, '*', 'a', String(attempt + 1), 's', '0', 'e', JSON.stringify(events));
      });
      await flight.endsWith('device_disconnected', /SECOND/);
    });

    it('restarted without persistence and down past the drain delay: 503 quickly, explicit endings, serves again by itself', async () => {
      const { api, dispatcher, tenant, model, redis } = r;
      await untilServed('before the outage');

      // In flight: a stream on the device, and a request queued behind it.
      const prompt = 'streams through the outage';
      const live = new LiveStream(
        `${api.url}/v1/chat/completions`,
        tenant.key,
        chatBody(model, prompt, { stream: true }),
      );
      await live.waitFor(/"content":"[^"]+"/);
      const waiting = chat(api, tenant, model, 'queued through the outage');
      waiting.catch(() => undefined); // awaited below

      await waitStatus(tenant.org.id, 'queued', 10_000);

      await redis.kill();
      const downAt = Date.now();
      // While it is down: quick 503s in each route family's shape, readiness says so, keys still work.
      for (let i = 0; i < 3; i++) {
        const [res, ms] = await timed(() => chat(api, tenant, model, `during the outage ${i}`));
        assertOpenAIError(res, 503, 'service_unavailable');
        expect({ ok: ms < QUICKLY_MS, message: `the 503 took ${ms} ms` }).toEqual(
          expect.objectContaining({ ok: true }),
        );
        await sleep(500);
      }
      const [ollama, ollamaMs] = await timed(() =>
        jsonHttp(
          'POST',
          `${api.url}/api/chat`,
          { ...chatBody(model, 'ollama during the outage'), stream: false },
          {
            headers: bearer(tenant.key),
          },
        ),
      );
      assertOllamaError(ollama, 503);
      expect({ ok: ollamaMs < QUICKLY_MS, message: `the Ollama 503 took ${ollamaMs} ms` }).toEqual(
        expect.objectContaining({ ok: true }),
      );
      const [ready, readyMs] = await timed(() => http('GET', `${api.url}/readyz`));
      expectStatus(ready, 503);
      expect(ready.body.checks.redis).toMatch(/unreachable/);
      expect(ready.body.checks.postgres).toBe('ok');
      expect({ ok: readyMs < QUICKLY_MS, message: `readyz took ${readyMs} ms` }).toEqual(
        expect.objectContaining({ ok: true }),
      );
      // Routes that need only Postgres keep working: a valid key lists its models, an unknown key is
      // refused as ever (the failed-authentication counter in Redis fails open).
      const [valid, validMs] = await timed(() =>
        jsonHttp('GET', `${api.url}/v1/models`, undefined, { headers: bearer(tenant.key) }),
      );
      expectStatus(valid, 200);
      expect(valid.body.data.map((m: { id: string }) => m.id)).toContain(model);
      expect({ ok: validMs < QUICKLY_MS, message: `/v1/models took ${validMs} ms` }).toEqual(
        expect.objectContaining({ ok: true }),
      );
      const [unknown, unknownMs] = await timed(() =>
        jsonHttp('GET', `${api.url}/v1/models`, undefined, {
          headers: bearer('sy_' + 'R'.repeat(40)),
          localAddress: loopbackAddress(),
        }),
      );
      assertOpenAIError(unknown, 401, 'invalid_api_key');
      expect({ ok: unknownMs < QUICKLY_MS, message: `/v1/models with an unknown key took ${unknownMs} ms` }).toEqual(
        expect.objectContaining({ ok: true }),
      );
      // Down for longer than BullMQ's drain delay (5 s).
      await sleep(Math.max(0, 7_000 - (Date.now() - downAt)));
      await redis.start();

      // Consumption resumes by itself: no process is restarted.
      const deadline = Date.now() + 30_000;
      let res = await chat(api, tenant, model, 'after the outage');
      while (res.status !== 200 && Date.now() < deadline) {
        expect({ ok: [503].includes(res.status), message: `while recovering: ${res.status} ${res.text}` }).toEqual(
          expect.objectContaining({ ok: true }),
        );
        assertOpenAIError(res, 503);
        await sleep(500);
        res = await chat(api, tenant, model, 'after the outage');
      }
      expect({ status: res.status, message: `the system did not recover: ${res.text}` }).toEqual(
        expect.objectContaining({ status: 200 }),
      );

      // What was in flight ended explicitly, and nothing was delivered twice.
      const queuedRes = await within(waiting, 45_000, 'the queued request');
      expect({ ok: [200, 503].includes(queuedRes.status), body: queuedRes.text }).toEqual(
        expect.objectContaining({ ok: true }),
      );
      if (queuedRes.status === 200) {
        expect(queuedRes.body.choices[0].finish_reason).toBe('stop');
      } else {
        assertOpenAIError(queuedRes, 503);
      }
      // MAX_STREAM_MS is 15 s here: by then at the latest the api must have ended the request.
      const address = live.events[0].task_address as string;
      await within(live.done, 22_000, 'the stream in flight').catch((error: Error) => {
        live.abort();
        throw new Error(
          `${error.message}; the client got:\n${live.text.slice(-600)}\nlogs:\n${logsAbout(address, api, dispatcher)}`,
        );
      });
      const reference = await chat(api, tenant, model, prompt);
      expectStatus(reference, 200);
      assertStreamEnded(live, reference.body.choices[0].message.content);
      assertConsistent(await waitAllTerminal(tenant.org.id, 30_000));
    });
  });

  describe('Postgres', () => {
    it('unreachable for a few seconds: requests fail cleanly and quickly, nothing is left inconsistent', async () => {
      const { api, tenant, model, proxy } = p;
      const before = await chat(api, tenant, model, 'before the cut');
      expectStatus(before, 200);
      const fresh = await createTenant([model]);

      const prompt = 'streams through the cut';
      const live = new LiveStream(
        `${api.url}/v1/chat/completions`,
        tenant.key,
        chatBody(model, prompt, { stream: true }),
      );
      await live.waitFor(/"content":"[^"]+"/);

      proxy.cut();
      const cutAt = Date.now();
      // While it is cut: a key the api has not seen needs a lookup and gets a quick, documented 503,
      // as Bearer and as X-API-Key; the key it has just used is served (a request needs no Postgres on
      // its way; the record is written once Postgres is back).
      const problems: string[] = [];
      for (const [who, header] of [
        [fresh, 'bearer'],
        [tenant, 'bearer'],
        [fresh, 'x-api-key'],
        [fresh, 'bearer'],
      ] as const) {
        const headers = header === 'bearer' ? bearer(who.key) : { 'x-api-key': who.key };
        const [res, ms] = await timed(() =>
          within(
            jsonHttp('POST', `${api.url}/v1/chat/completions`, chatBody(model, 'during the cut'), {
              headers,
              localAddress: loopbackAddress(),
            }),
            15_000,
            'a request',
          ),
        );
        expect({ ok: ms < 6_000, message: `answered after ${ms} ms` }).toEqual(expect.objectContaining({ ok: true }));
        if (who === tenant) {
          if (res.status !== 200) {
            problems.push(`a cached key as ${header}: ${res.status} ${res.text}`);
          }
        } else if (res.status !== 503 || res.body?.error?.code !== 'service_unavailable') {
          problems.push(`an unseen key as ${header}: ${res.status} ${res.text}`);
        } else {
          assertOpenAIError(res, 503, 'service_unavailable');
        }
      }
      const [ready, readyMs] = await timed(() => http('GET', `${api.url}/readyz`));
      expectStatus(ready, 503);
      expect(ready.body.checks.postgres).toMatch(/unreachable/);
      expect({ ok: readyMs < QUICKLY_MS, message: `readyz took ${readyMs} ms` }).toEqual(
        expect.objectContaining({ ok: true }),
      );
      const admin = await within(
        jsonHttp('GET', `${api.url}/admin/orgs`, undefined, { headers: adminAuth }),
        15_000,
        'an admin request',
      );
      assertOpenAIError(admin, 503, 'service_unavailable');

      await sleep(Math.max(0, 4_000 - (Date.now() - cutAt)));
      proxy.restore();

      const deadline = Date.now() + 20_000;
      let res = await chat(api, fresh, model, 'after the cut');
      while (res.status !== 200 && Date.now() < deadline) {
        assertOpenAIError(res, 503);
        await sleep(500);
        res = await chat(api, fresh, model, 'after the cut');
      }
      expect({ status: res.status, message: `the system did not recover: ${res.text}` }).toEqual(
        expect.objectContaining({ status: 200 }),
      );

      await within(live.done, 45_000, 'the stream in flight');
      const reference = await chat(api, tenant, model, prompt);
      expectStatus(reference, 200);
      assertStreamEnded(live, reference.body.choices[0].message.content);
      for (const t of [tenant, fresh]) {
        assertConsistent(await waitAllTerminal(t.org.id, 30_000));
      }
      expect(problems).toEqual([]);
      // Nothing half-written: every org, key and task the test made is whole.
      expect(await db().task.count({ where: { orgId: fresh.org.id, status: { notIn: TERMINAL as any } } })).toBe(0);
    });
  });
});
