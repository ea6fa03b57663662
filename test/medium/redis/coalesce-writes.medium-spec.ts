import type { Socket } from 'node:net';
import type { Redis } from 'ioredis';
import { coalesceWrites, createRedis } from '@app/common';
import { REDIS_URL, uniq } from '../../support/stack';

/** How many times the connection's socket wrote to the kernel (one write or writev each). */
function countWrites(redis: Redis): () => number {
  const stream = (
    redis as unknown as { stream: Socket & Record<'_write' | '_writev', (...args: unknown[]) => unknown> }
  ).stream;
  let writes = 0;
  for (const method of ['_write', '_writev'] as const) {
    const original = stream[method].bind(stream);
    stream[method] = (...args: unknown[]) => {
      writes++;
      return original(...args);
    };
  }
  return () => writes;
}

describe('coalesceWrites on a real Redis', () => {
  let redis: Redis;

  beforeAll(async () => {
    redis = coalesceWrites(createRedis(REDIS_URL));
    await redis.ping();
  });

  afterAll(async () => {
    await redis.quit();
  });

  it('sends the commands of one turn in one write, in the order they were issued, each with its own reply', async () => {
    const key = uniq('coalesce');
    const writes = countWrites(redis);
    const replies = await Promise.all([
      redis.rpush(key, 'a'),
      redis.rpush(key, 'b'),
      redis.lrange(key, 0, -1),
      redis.incr(key).catch((err: Error) => err.message),
      redis.del(key),
    ]);
    expect(writes()).toBe(1);
    expect(replies).toEqual([1, 2, ['a', 'b'], expect.stringContaining('WRONGTYPE'), 1]);
  });

  it('does not hold a command back while an earlier one awaits its reply', async () => {
    const key = uniq('coalesce-block');
    // A command whose reply takes 200 ms (a script that spins).
    const slow = redis.eval(
      'local t = redis.call("TIME") while true do local n = redis.call("TIME") if (n[1] - t[1]) * 1000000 + (n[2] - t[2]) > 200000 then break end end return 1',
      0,
    );
    await new Promise((r) => setImmediate(r));
    const writes = countWrites(redis);
    const next = redis.set(key, 'x');
    await new Promise((r) => setImmediate(r));
    // Written at once (auto-pipelining would wait for the script's reply before sending it).
    expect(writes()).toBe(1);
    expect(await slow).toBe(1);
    expect(await next).toBe('OK');
    await redis.del(key);
  });
});
