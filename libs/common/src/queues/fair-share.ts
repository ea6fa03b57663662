import type { Redis } from 'ioredis';
import { QUEUE_PREFIX, queueOfLine } from './queues';

/**
 * Fair share across the organizations of a queue, shared by every dispatcher through Redis: start-time
 * fair queueing. Each backlogged line has a pass (its virtual time); a device takes from the line with
 * the lowest pass, whose pass then grows by its stride, STRIDE_SCALE / weight; so with standing
 * backlogs, lines are served in proportion to their weights, and a line that comes back from idle
 * starts at the larger of the queue's virtual time and its own pass when it went idle: it gets its
 * turn soon, but neither a credit for the time it was away nor a fresh start that skips what it used.
 *
 * Keys, per queue: `sy:fair:{queue}` (sorted set of backlogged lines by pass), `sy:fairs:{queue}`
 * (hash: each line's stride, `_v` the virtual time, `p:{line}` a line's pass when it went idle). And
 * `sy:backlog`: queues with backlogged lines, for the dispatchers' safety sweep. The wait list of a
 * line is BullMQ's (`sy:{line}:wait`, oldest at the right end).
 */
export const STRIDE_SCALE = 1_000;

export const fairKeys = {
  passes: (queue: string) => `sy:fair:${queue}`,
  state: (queue: string) => `sy:fairs:${queue}`,
  backlog: 'sy:backlog',
};

const waitKey = `ARGV[2] .. ':' .. line .. ':wait'`;

/** KEYS: passes, state, backlog. ARGV: queue, prefix, line, stride, now. */
const ENQUEUE = `
local line = ARGV[3]
redis.call('HSET', KEYS[2], line, ARGV[4])
if not redis.call('ZSCORE', KEYS[1], line) then
  local v = tonumber(redis.call('HGET', KEYS[2], '_v') or '0')
  local last = tonumber(redis.call('HGET', KEYS[2], 'p:' .. line) or '0')
  redis.call('ZADD', KEYS[1], math.max(v, last), line)
end
redis.call('ZADD', KEYS[3], 'NX', ARGV[5], ARGV[1])
return 1`;

/** KEYS: passes, state, backlog. ARGV: queue, prefix. Returns the line to take from, or nil. */
const PICK = `
local lines = redis.call('ZRANGE', KEYS[1], 0, 31, 'WITHSCORES')
for i = 1, #lines, 2 do
  local line, pass = lines[i], tonumber(lines[i + 1])
  if redis.call('LLEN', ${waitKey}) > 0 then
    local stride = tonumber(redis.call('HGET', KEYS[2], line) or '${STRIDE_SCALE}')
    redis.call('HSET', KEYS[2], '_v', pass)
    redis.call('ZADD', KEYS[1], pass + stride, line)
    return line
  end
  redis.call('ZREM', KEYS[1], line)
  redis.call('HSET', KEYS[2], 'p:' .. line, pass)
end
if redis.call('ZCARD', KEYS[1]) == 0 then redis.call('ZREM', KEYS[3], ARGV[1]) end
return false`;

/**
 * A job was taken from a line without a pick (a device was idle when it came). KEYS as above. ARGV:
 * queue, prefix, line. Returns how many lines of the queue have jobs waiting still (0: none).
 */
const CHARGE = `
local line = ARGV[3]
local pass = redis.call('ZSCORE', KEYS[1], line)
if not pass then return redis.call('ZCARD', KEYS[1]) end
pass = tonumber(pass)
local stride = tonumber(redis.call('HGET', KEYS[2], line) or '${STRIDE_SCALE}')
if pass > tonumber(redis.call('HGET', KEYS[2], '_v') or '0') then redis.call('HSET', KEYS[2], '_v', pass) end
if redis.call('LLEN', ${waitKey}) == 0 then
  redis.call('ZREM', KEYS[1], line)
  redis.call('HSET', KEYS[2], 'p:' .. line, pass + stride)
  if redis.call('ZCARD', KEYS[1]) == 0 then redis.call('ZREM', KEYS[3], ARGV[1]) end
else
  redis.call('ZADD', KEYS[1], pass + stride, line)
end
return redis.call('ZCARD', KEYS[1])`;

/** A job went back to the head of its line: the line gets its turn back. KEYS as above. ARGV: queue, prefix, line, now. */
const REFUND = `
local line = ARGV[3]
local stride = tonumber(redis.call('HGET', KEYS[2], line) or '${STRIDE_SCALE}')
local v = tonumber(redis.call('HGET', KEYS[2], '_v') or '0')
local pass = redis.call('ZSCORE', KEYS[1], line)
if pass then
  redis.call('ZADD', KEYS[1], math.max(v, tonumber(pass) - stride), line)
else
  redis.call('ZADD', KEYS[1], v, line)
end
redis.call('ZADD', KEYS[3], 'NX', ARGV[4], ARGV[1])
return 1`;

/**
 * Where a waiting job stands among the jobs of its own line (its organization's): 1 = its line's next.
 * Other organizations' lines are not counted: how much another organization has queued is not the
 * asker's to learn. KEYS: the line's wait list. ARGV: job id.
 */
const POSITION = `
local at = redis.call('LPOS', KEYS[1], ARGV[1])
if not at then return false end
return redis.call('LLEN', KEYS[1]) - at`;

type Fair = Redis & {
  syFairEnqueue(
    a: string,
    b: string,
    c: string,
    queue: string,
    prefix: string,
    line: string,
    stride: number,
    now: number,
  ): Promise<number>;
  syFairPick(a: string, b: string, c: string, queue: string, prefix: string): Promise<string | null>;
  syFairCharge(a: string, b: string, c: string, queue: string, prefix: string, line: string): Promise<number>;
  syFairRefund(
    a: string,
    b: string,
    c: string,
    queue: string,
    prefix: string,
    line: string,
    now: number,
  ): Promise<number>;
  syFairPosition(wait: string, jobId: string): Promise<number | null>;
};

/** The stride of an organization of this weight (1-100). */
export function strideOf(weight: number): number {
  return Math.max(1, Math.round(STRIDE_SCALE / Math.min(100, Math.max(1, weight))));
}

export class FairShare {
  private readonly redis: Fair;

  constructor(redis: Redis) {
    redis.defineCommand('syFairEnqueue', { numberOfKeys: 3, lua: ENQUEUE });
    redis.defineCommand('syFairPick', { numberOfKeys: 3, lua: PICK });
    redis.defineCommand('syFairCharge', { numberOfKeys: 3, lua: CHARGE });
    redis.defineCommand('syFairRefund', { numberOfKeys: 3, lua: REFUND });
    redis.defineCommand('syFairPosition', { numberOfKeys: 1, lua: POSITION });
    this.redis = redis as Fair;
  }

  private static keys(queue: string): [string, string, string] {
    return [fairKeys.passes(queue), fairKeys.state(queue), fairKeys.backlog];
  }

  /** The line has a job, at this weight (issued at once, so that it follows the job on the same connection). */
  enqueue(line: string, weight: number): Promise<number> {
    const queue = queueOfLine(line);
    return this.redis.syFairEnqueue(...FairShare.keys(queue), queue, QUEUE_PREFIX, line, strideOf(weight), Date.now());
  }

  /** The line whose turn it is in a queue (charged for one job), or null when no line has a job. */
  pick(queue: string): Promise<string | null> {
    return this.redis.syFairPick(...FairShare.keys(queue), queue, QUEUE_PREFIX);
  }

  /**
   * A job was taken from `line` without a pick: its turn is used. Whether any line of the queue has
   * jobs waiting still (lines of the queue enqueued meanwhile are counted, as the script sees them).
   */
  async charge(line: string): Promise<boolean> {
    const queue = queueOfLine(line);
    return (await this.redis.syFairCharge(...FairShare.keys(queue), queue, QUEUE_PREFIX, line)) > 0;
  }

  /** A job went back to the head of its line: the line gets its turn back. */
  async refund(line: string): Promise<void> {
    const queue = queueOfLine(line);
    await this.redis.syFairRefund(...FairShare.keys(queue), queue, QUEUE_PREFIX, line, Date.now());
  }

  /** Where a waiting job stands in its own line (1 = its line's next), or null when it is not waiting. */
  position(line: string, jobId: string): Promise<number | null> {
    return this.redis.syFairPosition(`${QUEUE_PREFIX}:${line}:wait`, jobId);
  }

  /** The jobs waiting in a queue, all lines together. */
  async depth(queue: string): Promise<number> {
    const lines = await this.redis.zrange(fairKeys.passes(queue), 0, -1);
    if (lines.length === 0) {
      return 0;
    }
    const pipeline = this.redis.pipeline();
    lines.forEach((line) => pipeline.llen(`${QUEUE_PREFIX}:${line}:wait`));
    const replies = (await pipeline.exec()) ?? [];
    return replies.reduce((n, [, count]) => n + Number(count ?? 0), 0);
  }

  /** Queues with a backlog, for a dispatcher's safety sweep. */
  backlogged(limit = 10_000): Promise<string[]> {
    return this.redis.zrange(fairKeys.backlog, 0, limit - 1);
  }
}
