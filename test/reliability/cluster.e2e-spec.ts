import { Cluster } from 'ioredis';
import { startEmbeddedRedisCluster } from '../../apps/cli/src/embedded/embedded-redis-cluster';
import type { EmbeddedRedisCluster } from '../../apps/cli/src/embedded/embedded-redis-cluster';
import { closeDb, createDevice, createTenant, sleep, uniq } from '../support/stack';
import type { Api, Dispatcher, Proc, Tenant } from '../support/stack';
import { expectStatus } from '../support/expect-status';
import {
  LiveStream,
  TERMINAL,
  assertStreamEnded,
  bearer,
  chatBody,
  jsonHttp,
  sseContent,
  startApi,
  startDevice,
  startDispatcher,
  stopAll,
  waitAllTerminal,
  waitTasks,
  within,
} from './helpers';

/**
 * Switchyard on a Redis Cluster (issue 34): two apis and two dispatchers on a cluster of 3 masters,
 * each with a replica, set by REDIS_CLUSTER_NODES. Requests of every kind are served through either
 * api, their keys spread over the masters; then a master is killed (SIGKILL) while streams are in
 * flight: its replica takes over, every client gets its answer or an explicit error, nothing is
 * delivered twice, every task ends, and new requests are served within seconds.
 */

/** Every sim device of this suite writes replies of this many tokens. */
const TOKENS = 12;
/** A bound on a client's wait through a failover: far above it, far below the stream timeout. */
const NO_HANG_MS = 40_000;

describe('on a Redis Cluster: two apis, two dispatchers', () => {
  let cluster: EmbeddedRedisCluster;
  let client: Cluster;
  const servers: { proc: Proc }[] = [];
  const devices: Proc[] = [];
  let apis: Api[];
  let dispatchers: Dispatcher[];
  let tenant: Tenant;
  const model = uniq('cluster');
  /** A model served by one slow device: its requests wait in the queue. */
  const slowModel = uniq('cluster-slow');

  beforeAll(async () => {
    cluster = await startEmbeddedRedisCluster({ masters: 3, replicasPerMaster: 1, nodeTimeoutMs: 1_000 });
    client = new Cluster(cluster.nodes);
    const env = {
      REDIS_CLUSTER_NODES: cluster.seeds,
      QUEUE_TIMEOUT_MS: '20000',
      TASK_IDLE_TIMEOUT_MS: '10000',
      MAX_STREAM_MS: '45000',
      LOG_LEVEL: 'info',
    };
    const [api1, api2, dispatcher1, dispatcher2] = await Promise.all([
      startApi(env),
      startApi(env),
      startDispatcher(env),
      startDispatcher(env),
    ]);
    apis = [api1, api2];
    dispatchers = [dispatcher1, dispatcher2];
    servers.push(...apis, ...dispatchers);
    tenant = await createTenant([model, slowModel]);
    const online = { clusterSeeds: cluster.seeds };
    for (let i = 0; i < 4; i++) {
      const { token } = await createDevice();
      devices.push(
        await startDevice(dispatchers[i % 2], token, { models: [model], tokens: TOKENS, tokensPerSecond: 40 }, online),
      );
    }
    const { token } = await createDevice();
    devices.push(
      await startDevice(dispatchers[0], token, { models: [slowModel], tokens: TOKENS, tokensPerSecond: 30 }, online),
    );
  }, 120_000);

  afterAll(async () => {
    client?.disconnect();
    await stopAll(devices, servers, cluster ? [cluster] : []);
    await closeDb();
  });

  const chat = (api: Api, content: string, extra: Record<string, unknown> = {}, on = model) =>
    jsonHttp('POST', `${api.url}/v1/chat/completions`, chatBody(on, content, extra), {
      headers: bearer(tenant.key),
      timeoutMs: NO_HANG_MS,
    });

  /** The answer to a prompt, served whole (the sim answers a prompt the same way every time). */
  async function reference(content: string): Promise<string> {
    const res = await chat(apis[0], content);
    expectStatus(res, 200);
    return res.body.choices[0].message.content as string;
  }

  it('serves plain and streamed requests through either api; the keys spread over the masters', async () => {
    const plain = await Promise.all(Array.from({ length: 8 }, (_, i) => chat(apis[i % 2], `plain ${i}`)));
    for (const res of plain) {
      expectStatus(res, 200);
      expect(res.body.choices[0].finish_reason).toBe('stop');
      expect(res.body.usage.completion_tokens).toBe(TOKENS);
    }
    const streams = Array.from(
      { length: 4 },
      (_, i) =>
        new LiveStream(
          `${apis[i % 2].url}/v1/chat/completions`,
          tenant.key,
          chatBody(model, `streamed ${i}`, { stream: true }),
        ),
    );
    await Promise.all(streams.map((s) => within(s.done, NO_HANG_MS, 'a stream')));
    for (const [i, live] of streams.entries()) {
      expectStatus(live, 200);
      expect(live.events.at(-1)).toBe('[DONE]');
      expect(sseContent(live.events)).toBe(await reference(`streamed ${i}`));
    }
    const rows = await waitAllTerminal(tenant.org.id, 20_000, 12 + 4);
    expect(rows.every((row) => row.status === 'completed')).toBe(true);

    // Each master holds keys of Switchyard's (records streams, task states, queues, devices).
    const holding = [];
    for (const master of client.nodes('master')) {
      const [, found] = await master.scan('0', 'MATCH', 'sy:{*}:*', 'COUNT', 10_000);
      holding.push(found.length);
    }
    expect(holding.filter((n) => n > 0).length).toBeGreaterThanOrEqual(2);

    // Jobs, cancels and presence changes go over sharded channels, one of each per partition, each heard
    // on the master of its slot (the dispatchers' jobs and cancels, the apis' presence changes).
    const sharded: string[] = [];
    for (const master of client.nodes('master')) {
      sharded.push(...((await master.call('PUBSUB', 'SHARDCHANNELS', 'sy:*')) as string[]));
    }
    expect(sharded.filter((c) => c.endsWith(':jobs'))).toHaveLength(16);
    expect(sharded.filter((c) => c.endsWith(':cancel'))).toHaveLength(16);
    expect(sharded.filter((c) => c.endsWith(':presence-changed'))).toHaveLength(16);
    const jobs = sharded.filter((c) => c.endsWith(':jobs'));
    const master = client.nodes('master');
    const listeners = await Promise.all(
      jobs.map(async (c) => {
        for (const node of master) {
          const [, n] = (await node.call('PUBSUB', 'SHARDNUMSUB', c)) as [string, number];
          if (n > 0) {
            return n;
          }
        }
        return 0;
      }),
    );
    // Both dispatchers hear every partition's jobs.
    expect(new Set(listeners)).toEqual(new Set([2]));
  }, 90_000);

  it('queues requests behind a busy device and serves them in turn; a client that leaves cancels its task', async () => {
    const queued = await Promise.all(
      Array.from({ length: 3 }, (_, i) => chat(apis[i % 2], `queued ${i}`, {}, slowModel)),
    );
    for (const res of queued) {
      expectStatus(res, 200);
      expect(res.body.usage.completion_tokens).toBe(TOKENS);
    }

    const live = new LiveStream(
      `${apis[1].url}/v1/chat/completions`,
      tenant.key,
      chatBody(slowModel, 'leaves early', { stream: true }),
    );
    await live.waitFor(/"content":"[^"]+"/);
    const address = live.events[0].task_address as string;
    live.abort();
    const [row] = await waitTasks(
      { address },
      (rows) => rows.length === 1 && TERMINAL.includes(rows[0].status),
      20_000,
      'the abandoned task to end',
    );
    expect(row.status).toBe('cancelled');
    expect(row.errorCode).toBe('client_disconnected');
  }, 90_000);

  it('a master killed under load: its replica takes over, every client gets an answer or an explicit error, and new requests are served within seconds', async () => {
    const prompts = Array.from({ length: 12 }, (_, i) => `through a failover ${i}`);
    const answers = new Map<string, string>();
    for (const prompt of prompts) {
      answers.set(prompt, await reference(prompt));
    }
    const before = new Date();
    const streams = prompts.map(
      (prompt, i) =>
        new LiveStream(`${apis[i % 2].url}/v1/chat/completions`, tenant.key, chatBody(model, prompt, { stream: true })),
    );
    await Promise.all(streams.slice(0, 4).map((s) => s.waitFor(/"content":"[^"]+"/)));

    const [victim] = await cluster.masters();
    const killedAt = Date.now();
    await cluster.kill(victim.port);
    // When the cluster has three masters again, the victim's replica among them.
    const promoted = (async () => {
      for (;;) {
        const masters = await cluster.masters().catch(() => []);
        if (masters.length === 3 && masters.every((m) => m.port !== victim.port)) {
          return Date.now();
        }
        await sleep(20);
      }
    })();

    // New requests are served again once the replica is promoted.
    let servedAt = 0;
    while (!servedAt) {
      const res = await chat(apis[0], `after the failover ${Date.now()}`).catch(() => null);
      if (res?.status === 200) {
        servedAt = Date.now();
      } else {
        expect({ ok: Date.now() - killedAt < NO_HANG_MS, last: res?.status ?? 'no answer' }).toEqual(
          expect.objectContaining({ ok: true }),
        );
        await sleep(100);
      }
    }

    await Promise.all(streams.map((s) => within(s.done, NO_HANG_MS, 'a stream through the failover')));
    // Whole and each token once, or a prefix of the answer and an explicit error.
    const outcomes = streams.map((live, i) =>
      assertStreamEnded(live, answers.get(prompts[i])!) === 'whole' ? 'whole' : String(live.events.at(-1).error.code),
    );

    const rows = await waitTasks(
      { orgId: tenant.org.id, queuedAt: { gte: before } },
      (found) => found.length >= prompts.length && found.every((row) => TERMINAL.includes(row.status)),
      45_000,
      'every task of the failover to end',
    );
    const promotedAt = await within(promoted, NO_HANG_MS, 'the replica to be promoted');
    process.stdout.write(
      `FAILOVER Redis master SIGKILL → replica promoted: ${promotedAt - killedAt} ms, ` +
        `first new request served: ${servedAt - killedAt} ms; ` +
        `${prompts.length} streams in flight: ${JSON.stringify(tally(outcomes))}; ` +
        `tasks: ${JSON.stringify(tally(rows.map((row) => `${row.status}${row.errorCode ? `/${row.errorCode}` : ''}`)))}\n`,
    );
    expect(servedAt - killedAt).toBeLessThan(NO_HANG_MS);
  }, 180_000);
});

function tally(values: string[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const value of values) {
    counts[value] = (counts[value] ?? 0) + 1;
  }
  return counts;
}
