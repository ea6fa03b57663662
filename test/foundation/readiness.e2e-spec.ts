import {
  ADMIN_TOKEN,
  DATABASE_URL,
  REDIS_URL,
  baseEnv,
  closeDb,
  freePort,
  http,
  sleep,
  startApi,
  startDispatcher,
  startNode,
  within,
} from '../support/stack';
import type { Api, Dispatcher } from '../support/stack';
import { TcpProxy } from '../reliability/helpers';
import { inBatches, stopApis } from './helpers';
import { expectStatus } from '../support/expect-status';

/** What a readiness answer must never show: addresses, ports, users or driver messages. */
function assertNothingInternal(text: string, ...ports: number[]): void {
  expect({ text, message: text }).not.toEqual(
    expect.objectContaining({
      text: expect.stringMatching(/127\.0\.0\.1|localhost|ECONN|postgres(ql)?:\/\/|redis:\/\/|connect |timeout/i),
    }),
  );
  for (const port of ports) {
    expect({ ok: !text.includes(String(port)), message: `${text} shows port ${port}` }).toEqual(
      expect.objectContaining({ ok: true }),
    );
  }
}

/** /healthz, /readyz with each dependency down, and a bad configuration value. */
describe('health, readiness and configuration', () => {
  let api: Api;
  let noRedis: Api;
  let noPostgres: Api;
  let dispatcher: Dispatcher;
  let dispatcherNoPostgres: Dispatcher;
  let dispatcherCutRedis: Dispatcher;
  let redisProxy: TcpProxy;
  let redisPort: number;
  let postgresPort: number;

  beforeAll(async () => {
    [redisPort, postgresPort] = await Promise.all([freePort(), freePort()]);
    const deadDatabase = new URL(DATABASE_URL);
    deadDatabase.port = String(postgresPort);
    // A user and password in the URLs: the answers must not show them either.
    deadDatabase.username = 'postgres';
    deadDatabase.password = 'pg-secret-in-url';
    // One after the other: a start is allowed 15 s, and the machine may be small and busy.
    api = await startApi();
    noRedis = await startApi({ REDIS_URL: `redis://:redis-secret-in-url@127.0.0.1:${redisPort}/15` }, undefined, {
      ready: false,
    });
    noPostgres = await startApi({ DATABASE_URL: deadDatabase.toString() }, undefined, { ready: false });
    // The dispatcher needs Redis to start: its Redis goes through a proxy that the test cuts.
    const target = new URL(REDIS_URL);
    redisProxy = await TcpProxy.start(target.hostname, Number(target.port || 6379));
    const proxied = new URL(REDIS_URL);
    proxied.port = String(redisProxy.port);
    dispatcher = await startDispatcher();
    dispatcherNoPostgres = await startDispatcher({ DATABASE_URL: deadDatabase.toString() });
    dispatcherCutRedis = await startDispatcher({ REDIS_URL: proxied.toString() });
  });

  /**
   * GET /readyz until the checks come out as expected (at most 4 tries). Each check has a 1.5 s
   * budget, which a starved CPU can exceed for a healthy dependency; the last answer is returned.
   */
  async function readyz(server: { url: string }, expected: { postgres: boolean; redis: boolean }) {
    let res = await http('GET', `${server.url}/readyz`);
    for (let attempt = 1; attempt < 4; attempt++) {
      const checks = (res.body as { checks?: Record<string, string> } | undefined)?.checks ?? {};
      if ((checks.postgres === 'ok') === expected.postgres && (checks.redis === 'ok') === expected.redis) {
        break;
      }
      await sleep(250);
      res = await http('GET', `${server.url}/readyz`);
    }
    return res;
  }

  afterAll(async () => {
    await stopApis(api, noRedis, noPostgres);
    await Promise.all([dispatcher, dispatcherNoPostgres, dispatcherCutRedis].map((d) => d?.stop()));
    await redisProxy?.stop();
    await closeDb();
  });

  test('GET /healthz is 200 {"status":"ok"}, without credentials', async () => {
    for (const server of [api, noRedis, noPostgres]) {
      const res = await http('GET', `${server.url}/healthz`);
      expectStatus(res, 200);
      expect(res.body).toEqual({ status: 'ok' });
    }
  });

  test('GET /readyz is 200 when Postgres and Redis answer', async () => {
    const res = await readyz(api, { postgres: true, redis: true });
    expectStatus(res, 200);
    expect(res.body.status).toBe('ok');
    expect(res.body.checks).toEqual({ postgres: 'ok', redis: 'ok' });
  });

  test('GET /readyz is 503 naming redis when Redis is unreachable', async () => {
    const res = await readyz(noRedis, { postgres: true, redis: false });
    expectStatus(res, 503);
    expect(res.body.error.code).toBe('service_unavailable');
    expect(res.body.error.message).toMatch(/redis/i);
    expect(res.body.error.message).not.toMatch(/postgres/i);
    expect(res.body.checks).toEqual({ postgres: 'ok', redis: 'unreachable' });
    assertNothingInternal(res.text, redisPort);
    // The details are for the operator, in the log.
    await noRedis.proc.waitFor(/readiness check failed/);
    expect(noRedis.proc.output).toMatch(/"dependency":"redis"/);
  });

  test('GET /readyz is 503 naming postgres when Postgres is unreachable', async () => {
    const res = await readyz(noPostgres, { postgres: false, redis: true });
    expectStatus(res, 503);
    expect(res.body.error.code).toBe('service_unavailable');
    expect(res.body.error.message).toMatch(/postgres/i);
    expect(res.body.error.message).not.toMatch(/redis/i);
    expect(res.body.checks).toEqual({ postgres: 'unreachable', redis: 'ok' });
    assertNothingInternal(res.text, postgresPort);
    expect(res.text).not.toMatch(/pg-secret-in-url|switchyard_test/);
    await noPostgres.proc.waitFor(/readiness check failed/);
    expect(noPostgres.proc.output).toMatch(/"dependency":"postgres"/);
  });

  test('the dispatcher: GET /readyz is 200 with both up, 503 naming postgres or redis, nothing internal', async () => {
    const ok = await readyz(dispatcher, { postgres: true, redis: true });
    expectStatus(ok, 200);
    expect(ok.body).toEqual({ status: 'ok', checks: { postgres: 'ok', redis: 'ok' } });

    const noPg = await readyz(dispatcherNoPostgres, { postgres: false, redis: true });
    expectStatus(noPg, 503);
    expect(noPg.body.error.code).toBe('service_unavailable');
    expect(noPg.body.error.message).toBe('not ready: postgres unreachable');
    expect(noPg.body.checks).toEqual({ postgres: 'unreachable', redis: 'ok' });
    assertNothingInternal(noPg.text, postgresPort);
    expect(noPg.text).not.toMatch(/pg-secret-in-url|switchyard_test/);

    const before = await readyz(dispatcherCutRedis, { postgres: true, redis: true });
    expectStatus(before, 200);
    redisProxy.cut();
    try {
      const cut = await readyz(dispatcherCutRedis, { postgres: true, redis: false });
      expectStatus(cut, 503);
      expect(cut.body.error.message).toBe('not ready: redis unreachable');
      expect(cut.body.checks).toEqual({ postgres: 'ok', redis: 'unreachable' });
      assertNothingInternal(cut.text, redisProxy.port);
      await dispatcherCutRedis.proc.waitFor(/readiness check failed/);
    } finally {
      redisProxy.restore();
    }
    // Back once Redis is.
    let again = await readyz(dispatcherCutRedis, { postgres: true, redis: true });
    for (let i = 0; i < 20 && again.status !== 200; i++) {
      await sleep(500);
      again = await readyz(dispatcherCutRedis, { postgres: true, redis: true });
    }
    expectStatus(again, 200);
  });

  test('a bad configuration value stops the api with one stderr line naming the variable', async () => {
    const cases: Record<string, string>[] = [{ API_PORT: 'abc' }, { REDIS_URL: 'http://127.0.0.1:6379' }];
    await inBatches(
      cases.map((extra) => async () => {
        const [name] = Object.keys(extra);
        const port = String(await freePort());
        const proc = startNode('apps/api/src/main.js', [], baseEnv({ API_PORT: port, ADMIN_TOKEN, ...extra }));
        const code = await within(proc.exited, 30_000, `the api with ${name}=${extra[name]} to stop`).catch(
          async (error: Error) => {
            await proc.stop();
            throw new Error(`${error.message}:\n${proc.output}`);
          },
        );
        expect({
          ok: code !== 0 && code !== null,
          message: `api with ${name}=${extra[name]} exited ${code}:\n${proc.output}`,
        }).toEqual(expect.objectContaining({ ok: true }));
        const lines = proc.stderr.trim().split('\n');
        expect({ length: lines.length, message: `expected one stderr line for ${name}, got:\n${proc.stderr}` }).toEqual(
          expect.objectContaining({ length: 1 }),
        );
        expect({ actual: lines[0], stderr: proc.stderr }).toEqual(
          expect.objectContaining({ actual: expect.stringMatching(new RegExp(name)) }),
        );
      }),
    );
  });
});
