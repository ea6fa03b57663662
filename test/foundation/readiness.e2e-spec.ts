import assert from 'node:assert/strict';
import {
  ADMIN_TOKEN,
  DATABASE_URL,
  baseEnv,
  closeDb,
  freePort,
  http,
  sleep,
  startApi,
  startNode,
  within,
} from '../support/stack';
import type { Api } from '../support/stack';
import { inBatches, stopApis } from './helpers';

/** /healthz, /readyz with each dependency down, and a bad configuration value. */
describe('health, readiness and configuration', () => {
  let api: Api;
  let noRedis: Api;
  let noPostgres: Api;

  beforeAll(async () => {
    const [redisPort, postgresPort] = await Promise.all([freePort(), freePort()]);
    const deadDatabase = new URL(DATABASE_URL);
    deadDatabase.port = String(postgresPort);
    // One after the other: a start is allowed 15 s, and the machine may be small and busy.
    api = await startApi();
    noRedis = await startApi({ REDIS_URL: `redis://127.0.0.1:${redisPort}/15` });
    noPostgres = await startApi({ DATABASE_URL: deadDatabase.toString() });
  });

  /**
   * GET /readyz until the checks come out as expected (at most 4 tries). Each check has a 1.5 s
   * budget, which a starved CPU can exceed for a healthy dependency; the last answer is returned.
   */
  async function readyz(server: Api, expected: { postgres: boolean; redis: boolean }) {
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
    assert.notEqual(res.body.checks.redis, 'ok');
    assert.equal(res.body.checks.postgres, 'ok');
  });

  test('GET /readyz is 503 naming postgres when Postgres is unreachable', async () => {
    const res = await readyz(noPostgres, { postgres: false, redis: true });
    assert.equal(res.status, 503, res.text);
    assert.equal(res.body.error.code, 'service_unavailable');
    assert.match(res.body.error.message, /postgres/i);
    assert.doesNotMatch(res.body.error.message, /redis/i);
    assert.notEqual(res.body.checks.postgres, 'ok');
    assert.equal(res.body.checks.redis, 'ok');
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
