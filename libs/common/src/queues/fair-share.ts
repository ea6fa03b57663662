import type { RedisClient } from '../redis/redis';
import { KeySpace } from '../redis/key-space';
import { queueOfLine } from './queues';

/**
 * Fair share across the organizations of a queue, shared by every dispatcher through Redis: start-time
 * fair queueing. Each backlogged line has a pass (its virtual time); a device takes from the line with
 * the lowest pass, whose pass then grows by its stride, STRIDE_SCALE / weight; so with standing
 * backlogs, lines are served in proportion to their weights, and a line that comes back from idle
 * starts at the larger of the queue's virtual time and its own pass when it went idle: it gets its
 * turn soon, but neither a credit for the time it was away nor a fresh start that skips what it used.
 *
 * Keys, per queue: fairPasses (sorted set of backlogged lines by pass), fairState (hash: each line's
 * stride, `_v` the virtual time, `p:{line}` a line's pass when it went idle). And the backlog of the
 * queue's partition: queues with backlogged lines, for the dispatchers' safety sweep. The wait list
 * of a line is BullMQ's (lineWait, oldest at the right end). On a cluster all of them share the
 * queue's slot (see KeySpace).
 *
 * Every script touches only the keys it is passed, never one it builds from a value it read: Redis
 * Cluster routes a script by its keys, and a key named inside the script may live on another node. So
 * a pick, which reads the wait lists of the lines with the lowest passes, is passed those lines and
 * their wait lists: the ones the previous pick of the queue saw (see FairShare.pick).
 */
export const STRIDE_SCALE = 1_000;

/**
 * How many lines a pick looks at, lowest passes first: the most wait lists it reads (each line it finds
 * empty is dropped, so a later pick reaches the next ones), and so the most a pick is passed.
 */
export const PICK_WINDOW = 32;

/**
 * Calls of PICK a pick makes before it gives up for now. A retry is passed the lines the stale answer
 * saw, so it is stale again only if the lowest passes changed within one round trip (a line came, or
 * other dispatchers' picks moved lines of a queue of more than PICK_WINDOW); three times in a row is
 * churn the sweep can come back to (see FairShare.pick).
 */
export const PICK_TRIES = 4;

/**
 * The queues whose lowest lines a FairShare remembers (see FairShare.pick). A dispatcher picks from
 * its devices' queues, rarely more than dozens; the bound only keeps queues that came and went from
 * piling up. A queue forgotten costs its next pick one more round trip.
 */
const MAX_WINDOWS = 1_000;

/** KEYS: passes, state, backlog. ARGV: queue, line, stride, now. */
const ENQUEUE = `
local line = ARGV[2]
local state = redis.call('HMGET', KEYS[2], line, '_v', 'p:' .. line)
if state[1] ~= ARGV[3] then redis.call('HSET', KEYS[2], line, ARGV[3]) end
if not redis.call('ZSCORE', KEYS[1], line) then
  redis.call('ZADD', KEYS[1], math.max(tonumber(state[2] or '0'), tonumber(state[3] or '0')), line)
end
redis.call('ZADD', KEYS[3], 'NX', ARGV[4], ARGV[1])
return 1`;

/**
 * KEYS: passes, state, backlog, wait_1..wait_k. ARGV: queue, line_1..line_k: the candidates, lines the
 * caller believes are the queue's PICK_WINDOW lowest (in any order; more are fine), each with its
 * wait list (this.keys.lineWait(line_j) is KEYS[3 + j]).
 *
 * When a line among the lowest was not passed, its wait list cannot be read: nothing changes and the
 * answer is {'stale', false, lines}, the lowest lines now, for the caller to try again with. Otherwise
 * {'ok', line, lines?}: line is the line to take from (charged for one job), or false when none of the
 * lowest has a job (those found empty were dropped); lines, the lowest lines after the pick, comes only
 * when they are not the candidates (a line took its stride past the window, lines were dropped).
 */
const PICK = `
local wait = {}
for j = 1, #ARGV - 1 do wait[ARGV[1 + j]] = KEYS[3 + j] end
local function passed(lines)
  for _, line in ipairs(lines) do
    if not wait[line] then return false end
  end
  return true
end

local window = redis.call('ZRANGE', KEYS[1], 0, ${PICK_WINDOW - 1}, 'WITHSCORES')
local lines = {}
for i = 1, #window, 2 do lines[#lines + 1] = window[i] end
if not passed(lines) then return {'stale', false, lines} end

local picked = false
for i = 1, #window, 2 do
  local line, pass = window[i], tonumber(window[i + 1])
  if redis.call('LLEN', wait[line]) > 0 then
    local stride = tonumber(redis.call('HGET', KEYS[2], line) or '${STRIDE_SCALE}')
    redis.call('HSET', KEYS[2], '_v', pass)
    redis.call('ZADD', KEYS[1], pass + stride, line)
    picked = line
    break
  end
  redis.call('ZREM', KEYS[1], line)
  redis.call('HSET', KEYS[2], 'p:' .. line, pass)
end
if not picked and redis.call('ZCARD', KEYS[1]) == 0 then redis.call('ZREM', KEYS[3], ARGV[1]) end

local after = redis.call('ZRANGE', KEYS[1], 0, ${PICK_WINDOW - 1})
if #after == #ARGV - 1 and passed(after) then return {'ok', picked} end
return {'ok', picked, after}`;

/**
 * A job was taken from a line without a pick (a device was idle when it came). KEYS: passes, state,
 * backlog, the line's wait list. ARGV: queue, line. Returns how many lines of the queue have jobs
 * waiting still (0: none).
 */
const CHARGE = `
local line = ARGV[2]
local pass = redis.call('ZSCORE', KEYS[1], line)
if not pass then return redis.call('ZCARD', KEYS[1]) end
pass = tonumber(pass)
local known = redis.call('HMGET', KEYS[2], line, '_v')
local stride = tonumber(known[1] or '${STRIDE_SCALE}')
local state = {}
if pass > tonumber(known[2] or '0') then state = {'_v', pass} end
local left
if redis.call('LLEN', KEYS[4]) == 0 then
  redis.call('ZREM', KEYS[1], line)
  state[#state + 1] = 'p:' .. line
  state[#state + 1] = pass + stride
  left = redis.call('ZCARD', KEYS[1])
  if left == 0 then redis.call('ZREM', KEYS[3], ARGV[1]) end
else
  redis.call('ZADD', KEYS[1], pass + stride, line)
  left = redis.call('ZCARD', KEYS[1])
end
if #state > 0 then redis.call('HSET', KEYS[2], unpack(state)) end
return left`;

/**
 * A job went back to the head of its line: the line gets its turn back. KEYS: passes, state, backlog.
 * ARGV: queue, line, now.
 */
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

type Fair = RedisClient & {
  syFairEnqueue(
    a: string,
    b: string,
    c: string,
    queue: string,
    line: string,
    stride: number,
    now: number,
  ): Promise<number>;
  syFairPick(numberOfKeys: number, ...keysThenArgs: string[]): Promise<PickAnswer>;
  syFairCharge(a: string, b: string, c: string, wait: string, queue: string, line: string): Promise<number>;
  syFairRefund(a: string, b: string, c: string, queue: string, line: string, now: number): Promise<number>;
  syFairPosition(wait: string, jobId: string): Promise<number | null>;
};

/** PICK's answer, as Redis turns it (false becomes null, a missing `lines` is absent). */
type PickAnswer = ['ok', string | null, string[]?] | ['stale', null, string[]];

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
  /**
   * The lowest lines of each queue as this process's last pick of it saw them, the next pick's
   * candidates; least recently used first, at most MAX_WINDOWS queues.
   */
  private readonly windows = new Map<string, readonly string[]>();
  private readonly keys: KeySpace;

  constructor(redis: RedisClient) {
    redis.defineCommand('syFairEnqueue', { numberOfKeys: 3, lua: ENQUEUE });
    // Passed as many wait lists as it has candidates: the number of keys comes first in each call.
    redis.defineCommand('syFairPick', { lua: PICK });
    redis.defineCommand('syFairCharge', { numberOfKeys: 4, lua: CHARGE });
    redis.defineCommand('syFairRefund', { numberOfKeys: 3, lua: REFUND });
    redis.defineCommand('syFairPosition', { numberOfKeys: 1, lua: POSITION });
    this.redis = redis as Fair;
    this.keys = KeySpace.of(redis);
  }

  /** A queue's keys as the scripts take them: passes, state, its partition's backlog. */
  private queueKeys(queue: string): [string, string, string] {
    const k = this.keys;
    return [k.fairPasses(queue), k.fairState(queue), k.backlog(k.partitionOf(queue))];
  }

  /** The line has a job, at this weight (issued at once, so that it follows the job on the same connection). */
  enqueue(line: string, weight: number): Promise<number> {
    const queue = queueOfLine(line);
    return this.redis.syFairEnqueue(...this.queueKeys(queue), queue, line, strideOf(weight), Date.now());
  }

  /**
   * The line whose turn it is in a queue (charged for one job), or null when none was found this time.
   *
   * PICK is passed the lines it may read (see PICK): those this process's last pick of the queue saw,
   * so that a pick costs one round trip while they stay the lowest. A stale answer changes nothing and
   * carries the lowest lines now: the pick is tried again with them, up to PICK_TRIES calls in all.
   * Then it gives up with null, which is never a wrong answer: the queue kept a line in its passes, so
   * it is still in its backlog set, and a dispatcher's safety sweep comes back to it (as after a pick that
   * dropped PICK_WINDOW empty lines and found no job).
   */
  async pick(queue: string): Promise<string | null> {
    let lines = this.window(queue);
    for (let i = 0; i < PICK_TRIES; i++) {
      const [outcome, line, seen] = await this.redis.syFairPick(
        3 + lines.length,
        ...this.queueKeys(queue),
        ...lines.map((l) => this.keys.lineWait(l)),
        queue,
        ...lines,
      );
      if (seen) {
        this.remember(queue, seen);
      }
      if (outcome === 'ok') {
        return line;
      }
      lines = seen;
    }
    return null;
  }

  /** The lines the last pick of the queue saw (none when forgotten), now the most recently used. */
  private window(queue: string): readonly string[] {
    const lines = this.windows.get(queue);
    if (!lines) {
      return [];
    }
    this.windows.delete(queue);
    this.windows.set(queue, lines);
    return lines;
  }

  /** What a pick saw of the queue's lowest lines; an empty queue is forgotten (its next pick passes none). */
  private remember(queue: string, lines: readonly string[]): void {
    this.windows.delete(queue);
    if (lines.length === 0) {
      return;
    }
    if (this.windows.size >= MAX_WINDOWS) {
      this.windows.delete(this.windows.keys().next().value!);
    }
    this.windows.set(queue, lines);
  }

  /**
   * A job was taken from `line` without a pick: its turn is used. Whether any line of the queue has
   * jobs waiting still (lines of the queue enqueued meanwhile are counted, as the script sees them).
   */
  async charge(line: string): Promise<boolean> {
    const queue = queueOfLine(line);
    return (await this.redis.syFairCharge(...this.queueKeys(queue), this.keys.lineWait(line), queue, line)) > 0;
  }

  /** A job went back to the head of its line: the line gets its turn back. */
  async refund(line: string): Promise<void> {
    const queue = queueOfLine(line);
    await this.redis.syFairRefund(...this.queueKeys(queue), queue, line, Date.now());
  }

  /** Where a waiting job stands in its own line (1 = its line's next), or null when it is not waiting. */
  position(line: string, jobId: string): Promise<number | null> {
    return this.redis.syFairPosition(this.keys.lineWait(line), jobId);
  }

  /** The jobs waiting in a queue, all lines together. */
  async depth(queue: string): Promise<number> {
    const lines = await this.redis.zrange(this.keys.fairPasses(queue), 0, -1);
    if (lines.length === 0) {
      return 0;
    }
    const pipeline = this.redis.pipeline();
    lines.forEach((line) => pipeline.llen(this.keys.lineWait(line)));
    const replies = (await pipeline.exec()) ?? [];
    return replies.reduce((n, [, count]) => n + Number(count ?? 0), 0);
  }

  /**
   * Queues with a backlog (at most `limit` of them, from every partition), for a dispatcher's safety
   * sweep and the operators' view.
   */
  async backlogged(limit = 10_000): Promise<string[]> {
    const stop = Number.isFinite(limit) ? limit - 1 : -1;
    const found = await Promise.all(this.keys.partitions.map((k) => this.redis.zrange(this.keys.backlog(k), 0, stop)));
    return found.flat().slice(0, limit);
  }

  /**
   * The lines of a queue that are backlogged (or were at the last pick), with how many jobs wait in
   * each and since when the oldest does: the operators' view of the queue.
   */
  async lines(queue: string): Promise<LineBacklog[]> {
    const lines = await this.redis.zrange(this.keys.fairPasses(queue), 0, -1);
    const backlogs: LineBacklog[] = [];
    for (const line of lines) {
      const wait = this.keys.lineWait(line);
      const [waiting, oldestId] = await Promise.all([this.redis.llen(wait), this.redis.lindex(wait, -1)]);
      // BullMQ's job hash keeps when the job was added.
      const added = oldestId ? await this.redis.hget(this.keys.lineJob(line, oldestId), 'timestamp') : null;
      backlogs.push({ line, waiting, oldestAddedAt: added ? Number(added) : null });
    }
    return backlogs;
  }
}
