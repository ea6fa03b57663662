import type { Redis } from 'ioredis';
import { keys, luaKey } from '../redis/keys';
import { queueOfLine } from './queues';

/**
 * Fair share across the organizations of a queue, shared by every dispatcher through Redis: start-time
 * fair queueing. Each backlogged line has a pass (its virtual time); a device takes from the line with
 * the lowest pass, whose pass then grows by its stride, STRIDE_SCALE / weight; so with standing
 * backlogs, lines are served in proportion to their weights, and a line that comes back from idle
 * starts at the larger of the queue's virtual time and its own pass when it went idle: it gets its
 * turn soon, but neither a credit for the time it was away nor a fresh start that skips what it used.
 *
 * Keys, per queue: keys.fairPasses (sorted set of backlogged lines by pass), keys.fairState (hash:
 * each line's stride, `_v` the virtual time, `p:{line}` a line's pass when it went idle). And
 * keys.backlog: queues with backlogged lines, for the dispatchers' safety sweep. The wait list of a
 * line is BullMQ's (keys.lineWait, oldest at the right end).
 */
export const STRIDE_SCALE = 1_000;

/** Fair share's keys (keys.fairPasses, keys.fairState, keys.backlog), by their role here. */
export const fairKeys = {
  passes: keys.fairPasses,
  state: keys.fairState,
  backlog: keys.backlog,
};

/** A line's wait list, named in the scripts from the line they read. */
const waitKey = luaKey(keys.lineWait, 'line');

/** KEYS: passes, state, backlog. ARGV: queue, line, stride, now. */
const ENQUEUE = `
local line = ARGV[2]
redis.call('HSET', KEYS[2], line, ARGV[3])
if not redis.call('ZSCORE', KEYS[1], line) then
  local v = tonumber(redis.call('HGET', KEYS[2], '_v') or '0')
  local last = tonumber(redis.call('HGET', KEYS[2], 'p:' .. line) or '0')
  redis.call('ZADD', KEYS[1], math.max(v, last), line)
end
redis.call('ZADD', KEYS[3], 'NX', ARGV[4], ARGV[1])
return 1`;

/** KEYS: passes, state, backlog. ARGV: queue. Returns the line to take from, or nil. */
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
 * queue, line. Returns how many lines of the queue have jobs waiting still (0: none).
 */
const CHARGE = `
local line = ARGV[2]
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

/** A job went back to the head of its line: the line gets its turn back. KEYS as above. ARGV: queue, line, now. */
const REFUND = `
local line = ARGV[2]
local stride = tonumber(redis.call('HGET', KEYS[2], line) or '${STRIDE_SCALE}')
local v = tonumber(redis.call('HGET', KEYS[2], '_v') or '0')
local pass = redis.call('ZSCORE', KEYS[1], line)
if pass then
  redis.call('ZADD', KEYS[1], math.max(v, tonumber(pass) - stride), line)
else
  redis.call('ZADD', KEYS[1], v, line)
end
redis.call('ZADD', KEYS[3], 'NX', ARGV[3], ARGV[1])
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
    line: string,
    stride: number,
    now: number,
  ): Promise<number>;
  syFairPick(a: string, b: string, c: string, queue: string): Promise<string | null>;
  syFairCharge(a: string, b: string, c: string, queue: string, line: string): Promise<number>;
  syFairRefund(a: string, b: string, c: string, queue: string, line: string, now: number): Promise<number>;
  syFairPosition(wait: string, jobId: string): Promise<number | null>;
};

/** A line of a queue as the operators' view shows it. */
export interface LineBacklog {
  line: string;
  /** Jobs waiting in it. */
  waiting: number;
  /** When its oldest waiting job was added (epoch ms), or null when none waits. */
  oldestAddedAt: number | null;
}

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
    return [keys.fairPasses(queue), keys.fairState(queue), keys.backlog];
  }

  /** The line has a job, at this weight (issued at once, so that it follows the job on the same connection). */
  enqueue(line: string, weight: number): Promise<number> {
    const queue = queueOfLine(line);
    return this.redis.syFairEnqueue(...FairShare.keys(queue), queue, line, strideOf(weight), Date.now());
  }

  /** The line whose turn it is in a queue (charged for one job), or null when no line has a job. */
  pick(queue: string): Promise<string | null> {
    return this.redis.syFairPick(...FairShare.keys(queue), queue);
  }

  /**
   * A job was taken from `line` without a pick: its turn is used. Whether any line of the queue has
   * jobs waiting still (lines of the queue enqueued meanwhile are counted, as the script sees them).
   */
  async charge(line: string): Promise<boolean> {
    const queue = queueOfLine(line);
    return (await this.redis.syFairCharge(...FairShare.keys(queue), queue, line)) > 0;
  }

  /** A job went back to the head of its line: the line gets its turn back. */
  async refund(line: string): Promise<void> {
    const queue = queueOfLine(line);
    await this.redis.syFairRefund(...FairShare.keys(queue), queue, line, Date.now());
  }

  /** Where a waiting job stands in its own line (1 = its line's next), or null when it is not waiting. */
  position(line: string, jobId: string): Promise<number | null> {
    return this.redis.syFairPosition(keys.lineWait(line), jobId);
  }

  /** The jobs waiting in a queue, all lines together. */
  async depth(queue: string): Promise<number> {
    const lines = await this.redis.zrange(keys.fairPasses(queue), 0, -1);
    if (lines.length === 0) {
      return 0;
    }
    const pipeline = this.redis.pipeline();
    lines.forEach((line) => pipeline.llen(keys.lineWait(line)));
    const replies = (await pipeline.exec()) ?? [];
    return replies.reduce((n, [, count]) => n + Number(count ?? 0), 0);
  }

  /** Queues with a backlog (at most `limit` of them), for a dispatcher's safety sweep and the operators' view. */
  backlogged(limit = 10_000): Promise<string[]> {
    return this.redis.zrange(keys.backlog, 0, Number.isFinite(limit) ? limit - 1 : -1);
  }

  /**
   * The lines of a queue that are backlogged (or were at the last pick), with how many jobs wait in
   * each and since when the oldest does: the operators' view of the queue.
   */
  async lines(queue: string): Promise<LineBacklog[]> {
    const lines = await this.redis.zrange(keys.fairPasses(queue), 0, -1);
    const backlogs: LineBacklog[] = [];
    for (const line of lines) {
      const wait = keys.lineWait(line);
      const [waiting, oldestId] = await Promise.all([this.redis.llen(wait), this.redis.lindex(wait, -1)]);
      // BullMQ's job hash keeps when the job was added.
      const added = oldestId ? await this.redis.hget(keys.lineJob(line, oldestId), 'timestamp') : null;
      backlogs.push({ line, waiting, oldestAddedAt: added ? Number(added) : null });
    }
    return backlogs;
  }
}
