import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { CHAT_JOB, FairShare, LineQueue, chatJobOptions, createRedis, fairKeys } from '@app/common';
import type { ChatJobData } from '@app/common';
import { REDIS_URL } from '../../support/stack';

/**
 * A job taken the moment it was announced is charged to its line without a pick, and the charge says
 * whether the queue has jobs waiting still: a dispatcher whose take left none does not look again
 * when its device is free (one script less per completion), and looks when another line has jobs.
 */
describe('fair share: charging a take', () => {
  let redis: Redis;
  let fair: FairShare;
  const model = `fair-${randomUUID().slice(0, 8)}`;
  const queue = `chat.network.${model}`;
  const lines = [`${queue}.org-a`, `${queue}.org-b`];
  let a: LineQueue;
  let b: LineQueue;

  beforeAll(() => {
    redis = createRedis(REDIS_URL);
    fair = new FairShare(redis);
    [a, b] = lines.map((line) => new LineQueue(line, redis, 60_000));
  });

  afterAll(async () => {
    await Promise.all([a, b].map((line) => line.obliterate({ force: true })));
    await Promise.all([a.close(), b.close()]);
    await redis.del(fairKeys.passes(queue), fairKeys.state(queue));
    await redis.zrem(fairKeys.backlog, queue);
    redis.disconnect();
  });

  async function add(line: LineQueue, name: string): Promise<void> {
    const taskId = randomUUID();
    const data = { v: 2, taskId, taskAddress: `network:${taskId}`, orgId: 'org' } as unknown as ChatJobData;
    await line.add(CHAT_JOB, data, chatJobOptions(taskId));
    await fair.enqueue(name, 1);
  }

  it('reports a backlog while any line of the queue has jobs waiting, and none once the last is taken', async () => {
    await add(a, lines[0]);
    await add(a, lines[0]);
    await add(b, lines[1]);

    expect(await a.take('t:1')).toBeDefined();
    expect(await fair.charge(lines[0])).toBe(true);
    expect(await a.take('t:2')).toBeDefined();
    // Org A's line is empty now, org B's is not.
    expect(await fair.charge(lines[0])).toBe(true);
    expect(await redis.zscore(fairKeys.backlog, queue)).not.toBeNull();
    expect(await b.take('t:3')).toBeDefined();
    expect(await fair.charge(lines[1])).toBe(false);
    expect(await redis.zscore(fairKeys.backlog, queue)).toBeNull();
    expect(await fair.pick(queue)).toBeNull();
  });

  it('a line enqueued before the charge runs counts', async () => {
    await add(a, lines[0]);
    expect(await a.take('t:4')).toBeDefined();
    await add(b, lines[1]);
    expect(await fair.charge(lines[0])).toBe(true);
    expect(await fair.pick(queue)).toBe(lines[1]);
  });
});
