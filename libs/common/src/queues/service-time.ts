import type { RedisClient } from '../redis/redis';
import { KeySpace } from '../redis/key-space';

/** How long a queue's service time is kept after its last completed task. */
const SERVICE_TIME_TTL_MS = 3_600_000;
/** At most one write per queue this often: a busy queue's samples are folded in together. */
const WRITE_INTERVAL_MS = 1_000;
/** The samples kept for one write: an older one would weigh less than 0.8^32 (under a thousandth). */
const MAX_SAMPLES = 32;

/**
 * A queue's recent service time on a device, an exponential moving average (each new sample weighs a
 * fifth), from which a waiting request's eta_ms is estimated (queueStanding). KEYS: the queue's service
 * time hash. ARGV: the TTL (ms), then the samples (ms), oldest first.
 */
const RECORD_LUA = `
local avg = tonumber(redis.call('HGET', KEYS[1], 'ms') or '')
for i = 2, #ARGV do
  local x = tonumber(ARGV[i])
  avg = avg and (avg * 0.8 + x * 0.2) or x
end
redis.call('HSET', KEYS[1], 'ms', math.floor(avg))
redis.call('PEXPIRE', KEYS[1], ARGV[1])`;

type ServiceTimeCommand = { syServiceTime(key: string, ttlMs: number, ...samples: number[]): Promise<null> };

/** The samples of one queue not yet written, and when it was last written (performance.now()). */
interface QueueSamples {
  samples: number[];
  writtenAt: number;
  timer: NodeJS.Timeout | null;
}

/**
 * The queues' service times (KeySpace.serviceTime): a completed task's time on its device is recorded.
 * A queue's first sample after a quiet second is written at once; the samples of a busier queue are
 * written together, once a second, so that the estimate costs Redis a few calls per queue and second
 * instead of four per completion. The samples of the last second die with the process: the estimate
 * is then that much behind.
 */
export class ServiceTimes {
  private readonly redis: RedisClient & ServiceTimeCommand;
  private readonly keys: KeySpace;
  /** Per queue of this process's completions; one small entry per (model, pool) seen. */
  private readonly queues = new Map<string, QueueSamples>();

  constructor(redis: RedisClient) {
    redis.defineCommand('syServiceTime', { numberOfKeys: 1, lua: RECORD_LUA });
    this.redis = redis as RedisClient & ServiceTimeCommand;
    this.keys = KeySpace.of(redis);
  }

  /** A task of `queue` completed after `ms` on its device. */
  record(queue: string, ms: number): void {
    const entry = this.queues.get(queue) ?? this.track(queue);
    entry.samples.push(ms);
    if (entry.samples.length > MAX_SAMPLES) {
      entry.samples.shift();
    }
    if (entry.timer) {
      return;
    }
    const wait = entry.writtenAt + WRITE_INTERVAL_MS - performance.now();
    if (wait <= 0) {
      this.write(queue, entry);
      return;
    }
    entry.timer = setTimeout(() => {
      entry.timer = null;
      this.write(queue, entry);
    }, wait);
    // An estimate is not worth keeping a process alive for.
    entry.timer.unref();
  }

  private track(queue: string): QueueSamples {
    const entry: QueueSamples = { samples: [], writtenAt: -Infinity, timer: null };
    this.queues.set(queue, entry);
    return entry;
  }

  private write(queue: string, entry: QueueSamples): void {
    const samples = entry.samples;
    entry.samples = [];
    entry.writtenAt = performance.now();
    // A failure leaves the estimate a step behind: the next completions write it again.
    this.redis.syServiceTime(this.keys.serviceTime(queue), SERVICE_TIME_TTL_MS, ...samples).catch(() => undefined);
  }
}
