import assert from 'node:assert/strict';
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

/** What a readiness answer must never show: addresses, ports, users or driver messages. */
function assertNothingInternal(text: string, ...ports: number[]): void {
  assert.doesNotMatch(text, /127\.0\.0\.1|localhost|ECONN|postgres(ql)?:\/\/|redis:\/\/|connect |timeout/i, text);
  for (const port of ports) {
    assert.ok(!text.includes(String(port)), `${text} shows port ${port}`);
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
    noRedis = await startApi({ REDIS_URL: `redis://:redis-secret-in-url@127.0.0.1:${redisPort}/15` });
    noPostgres = await startApi({ DATABASE_URL: deadDatabase.toString() });
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
      assert.equal(res.status, 200, res.text);
      expect(res.body).toEqual({ status: 'ok' });
    }
  });

  test('GET /readyz is 200 when Postgres and Redis answer', async () => {
    const res = await readyz(api, { postgres: true, redis: true });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.status, 'ok');
    expect(res.body.checks).toEqual({ postgres: 'ok', redis: 'ok' });
  });

  test('GET /readyz is 503 naming redis when Redis is unreachable', async () => {
    const res = await readyz(noRedis, { postgres: true, redis: false });
    assert.equal(res.status, 503, res.text);
    assert.equal(res.body.error.code, 'service_unavailable');
    assert.match(res.body.error.message, /redis/i);
    assert.doesNotMatch(res.body.error.message, /postgres/i);
    expect(res.body.checks).toEqual({ postgres: 'ok', redis: 'unreachable' });
    assertNothingInternal(res.text, redisPort);
    // The details are for the operator, in the log.
    await noRedis.proc.waitFor(/readiness check failed/);
    assert.match(noRedis.proc.output, /"dependency":"redis"/);
  });

  test('GET /readyz is 503 naming postgres when Postgres is unreachable', async () => {
    const res = await readyz(noPostgres, { postgres: false, redis: true });
    assert.equal(res.status, 503, res.text);
    assert.equal(res.body.error.code, 'service_unavailable');
    assert.match(res.body.error.message, /postgres/i);
    assert.doesNotMatch(res.body.error.message, /redis/i);
    expect(res.body.checks).toEqual({ postgres: 'unreachable', redis: 'ok' });
    assertNothingInternal(res.text, postgresPort);
    assert.doesNotMatch(res.text, /pg-secret-in-url|switchyard_test/);
    await noPostgres.proc.waitFor(/readiness check failed/);
    assert.match(noPostgres.proc.output, /"dependency":"postgres"/);
  });

  test('the dispatcher: GET /readyz is 200 with both up, 503 naming postgres or redis, nothing internal', async () => {
    const ok = await readyz(dispatcher, { postgres: true, redis: true });
    assert.equal(ok.status, 200, ok.text);
    expect(ok.body).toEqual({ status: 'ok', checks: { postgres: 'ok', redis: 'ok' } });

    const noPg = await readyz(dispatcherNoPostgres, { postgres: false, redis: true });
    assert.equal(noPg.status, 503, noPg.text);
    assert.equal(noPg.body.error.code, 'service_unavailable');
    assert.equal(noPg.body.error.message, 'not ready: postgres unreachable');
    expect(noPg.body.checks).toEqual({ postgres: 'unreachable', redis: 'ok' });
    assertNothingInternal(noPg.text, postgresPort);
    assert.doesNotMatch(noPg.text, /pg-secret-in-url|switchyard_test/);

    const before = await readyz(dispatcherCutRedis, { postgres: true, redis: true });
    assert.equal(before.status, 200, before.text);
    redisProxy.cut();
    try {
      const cut = await readyz(dispatcherCutRedis, { postgres: true, redis: false });
      assert.equal(cut.status, 503, cut.text);
      assert.equal(cut.body.error.message, 'not ready: redis unreachable');
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
    assert.equal(again.status, 200, again.text);
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
            assert.fail(`${error.message}:\n${proc.output}`);
          },
        );
        assert.ok(code !== 0 && code !== null, `api with ${name}=${extra[name]} exited ${code}:\n${proc.output}`);
        const lines = proc.stderr.trim().split('\n');
        assert.equal(lines.length, 1, `expected one stderr line for ${name}, got:\n${proc.stderr}`);
        assert.match(lines[0], new RegExp(name), proc.stderr);
      }),
    );
  });
});
