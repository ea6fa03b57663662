import type { RedisClient } from '../redis/redis';
import { KeySpace } from '../redis/key-space';

/** How long a queue's service time is kept after its last completed task. */
const SERVICE_TIME_TTL_MS = 3_600_000;

/**
 * A queue's recent service time on a device, an exponential moving average (each new sample weighs a
 * fifth), from which a waiting request's eta_ms is estimated (queueStanding). KEYS: the queue's service
 * time hash. ARGV: the sample (ms), the TTL (ms).
 */
const RECORD_LUA = `
local old = tonumber(redis.call('HGET', KEYS[1], 'ms') or '')
local x = tonumber(ARGV[1])
redis.call('HSET', KEYS[1], 'ms', old and math.floor(old * 0.8 + x * 0.2) or x)
redis.call('PEXPIRE', KEYS[1], ARGV[2])`;

type ServiceTimeCommand = { syServiceTime(key: string, ms: number, ttlMs: number): Promise<null> };

/** The queues' service times (KeySpace.serviceTime): a completed task's time on its device is recorded. */
export class ServiceTimes {
  private readonly redis: RedisClient & ServiceTimeCommand;

  constructor(redis: RedisClient) {
    redis.defineCommand('syServiceTime', { numberOfKeys: 1, lua: RECORD_LUA });
    this.redis = redis as RedisClient & ServiceTimeCommand;
  }

  /** A task of `queue` completed after `ms` on its device. */
  async record(queue: string, ms: number): Promise<void> {
    await this.redis.syServiceTime(KeySpace.of(this.redis).serviceTime(queue), ms, SERVICE_TIME_TTL_MS);
  }
}
