import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { CHAT_JOB, KeySpace, LineQueue, chatJobOptions, createRedis, queueOfLine } from '@app/common';
import type { JobData } from '@app/common';
import { REDIS_URL, sleep } from '../../support/stack';

/**
 * A job taken from its line whose lock lapsed (its dispatcher died before the claim, or its finish
 * failed) does not stay in the line's active list: BullMQ's stalled check, run on the shared
 * connection, puts it back in its line, where the next take meets it: its task's claim decides (an
 * ended task's job is finished and removed with its request text, see the Assigner).
 */
describe('stalled jobs in a line', () => {
  let redis: Redis;
  const line = `chat.network.stalled-${randomUUID().slice(0, 8)}.org`;
  let queue: LineQueue;

  beforeAll(() => {
    redis = createRedis(REDIS_URL);
    // A lock of 50 ms, so that it lapses within the test.
    queue = new LineQueue(line, redis, 50);
  });

  afterAll(async () => {
    await queue.close();
    redis.disconnect();
  });

  /** The next run of the check, as if STALLED_INTERVAL_MS had passed. */
  async function check(): Promise<string[]> {
    await redis.del(`${KeySpace.of(redis).queuePrefix(queueOfLine(line))}:${line}:stalled-check`);
    return queue.recoverStalled();
  }

  const data = (taskId: string): JobData =>
    ({ v: 2, taskId, taskAddress: `network:${taskId}`, orgId: 'org' }) as unknown as JobData;

  it('a lapsed lock: back to wait, each time, marked as failed once it stalled more than once', async () => {
    const taskId = randomUUID();
    await queue.add(CHAT_JOB, data(taskId), chatJobOptions(taskId));
    expect((await queue.take('dead-dispatcher:1'))?.id).toBe(taskId);
    await sleep(100);
    // The first run marks what is active; the next moves what is still active without a lock.
    expect(await check()).toEqual([]);
    expect(await check()).toEqual([taskId]);
    expect(await queue.getWaiting()).toHaveLength(1);

    expect((await queue.take('dead-dispatcher:2'))?.id).toBe(taskId);
    await sleep(100);
    await check();
    expect(await check()).toEqual([taskId]);
    expect(await redis.llen(KeySpace.of(redis).lineActive(line))).toBe(0);
    const back = await queue.take('live-dispatcher:1');
    expect(back?.id).toBe(taskId);
    expect(back?.deferredFailure).toMatch(/stalled/);
  });

  it('a job whose lock holds stays with its holder', async () => {
    const held = new LineQueue(`${line}-held`, redis, 60_000);
    try {
      const taskId = randomUUID();
      await held.add(CHAT_JOB, data(taskId), chatJobOptions(taskId));
      expect((await held.take('live-dispatcher:1'))?.id).toBe(taskId);
      await redis.del(`${KeySpace.of(redis).queuePrefix(queueOfLine(line))}:${line}-held:stalled-check`);
      expect(await held.recoverStalled()).toEqual([]);
      await redis.del(`${KeySpace.of(redis).queuePrefix(queueOfLine(line))}:${line}-held:stalled-check`);
      expect(await held.recoverStalled()).toEqual([]);
      expect(await held.getActiveCount()).toBe(1);
    } finally {
      await held.close();
    }
  });
});
