import type { RedisClient } from '../redis/redis';
import { KeySpace } from '../redis/key-space';
import type { FairShare } from './fair-share';
import { queueOfLine } from './queues';

/**
 * Where a waiting request stands, as far as its organization may know: its place among its own
 * organization's requests in the queue (1 = its next) and the wait that place alone makes.
 */
export interface QueueStanding {
  position: number;
  /**
   * The wait if the queue's devices served only this organization: other organizations' requests,
   * served in turn, can add to it. Null when there is no basis: no device serves the queue, or none
   * has completed a task of it lately.
   */
  etaMs: number | null;
}

/** The (pool, model) of a queue named `chat.<pool>.<model, percent-encoded>`. */
function poolAndModel(queue: string): { pool: string; model: string } {
  const [, pool, encoded] = queue.split('.');
  return { pool, model: decodeURIComponent(encoded) };
}

/**
 * A waiting task's standing, or null when it no longer waits. The estimate: its organization's
 * requests ahead of it and itself, served in rounds by the devices online for the queue, each round
 * taking the queue's recent service time (a moving average of its completed tasks' times on their
 * devices, see ServiceTimes). Three reads sent together: one round trip.
 */
export async function queueStanding(
  redis: RedisClient,
  fair: FairShare,
  line: string,
  taskId: string,
): Promise<QueueStanding | null> {
  const queue = queueOfLine(line);
  const { pool, model } = poolAndModel(queue);
  const [position, devices, serviceMs] = await Promise.all([
    fair.position(line, taskId),
    redis.zcount(KeySpace.of(redis).presence(pool, model), Date.now(), '+inf'),
    redis.hget(KeySpace.of(redis).serviceTime(queue), 'ms'),
  ]);
  if (position === null) {
    return null;
  }
  const ms = Number(serviceMs);
  const etaMs = devices > 0 && serviceMs !== null && ms >= 0 ? Math.ceil(position / devices) * ms : null;
  return { position, etaMs };
}
