import type { RedisClient } from '../redis/redis';
import { FairShare } from '../queues/fair-share';
import { decodePresenceMember, queueName } from '../queues/queues';
import { KeySpace } from '../redis/key-space';
import { scanKeys } from '../redis/scan';
import { DeviceStateRepository } from './device-state-repository';

/** One (model, pool) queue as an operator sees it, with its organizations' lines. */
export interface QueueLive {
  queue: string;
  model: string;
  pool: string;
  waiting: number;
  oldest_wait_ms: number | null;
  devices_online: number;
  devices_busy: number;
  lines: { org_id: string; waiting: number; oldest_wait_ms: number | null }[];
}

/**
 * The queues operators ask about, from what the dispatchers keep in Redis: each (model, pool) that
 * has devices online (presence) or jobs waiting (FairShare's lines), with its devices busy (their
 * live state, DeviceStateRepository). The admin HTTP API and the CLI both read it here.
 */
export class LiveState {
  private readonly fair: FairShare;
  private readonly devices: DeviceStateRepository;
  private readonly keys: KeySpace;

  constructor(private readonly redis: RedisClient) {
    this.keys = KeySpace.of(redis);
    this.fair = new FairShare(redis);
    this.devices = new DeviceStateRepository(redis);
  }

  /** Every queue that has devices online or jobs waiting, with its lines. */
  async queues(): Promise<QueueLive[]> {
    const names = new Set(await this.fair.backlogged(Infinity));
    const presence = new Map<string, string>();
    const scan = this.keys.presenceScan();
    for await (const found of scanKeys(this.redis, scan.match)) {
      for (const key of found) {
        const { pool, model } = scan.placeOf(key);
        const queue = queueName(model, pool);
        names.add(queue);
        presence.set(queue, key);
      }
    }
    const now = Date.now();
    const result: QueueLive[] = [];
    for (const queue of [...names].sort()) {
      const [, pool, encoded] = /^chat\.([^.]+)\.(.+)$/.exec(queue) ?? [];
      const model = decodeURIComponent(encoded ?? '');
      const lineStates = (await this.fair.lines(queue)).map((l) => ({
        org_id: l.line.slice(queue.length + 1),
        waiting: l.waiting,
        oldest_wait_ms: l.oldestAddedAt !== null ? Math.max(0, now - l.oldestAddedAt) : null,
      }));
      const presenceKey = presence.get(queue) ?? this.keys.presence(pool, model);
      const members = await this.redis.zrangebyscore(presenceKey, now, '+inf');
      const deviceIds = members.map((m) => decodePresenceMember(m).deviceId);
      const states = await this.devices.live(deviceIds);
      const waits = lineStates.map((l) => l.oldest_wait_ms).filter((w): w is number => w !== null);
      result.push({
        queue,
        model,
        pool,
        waiting: lineStates.reduce((n, l) => n + l.waiting, 0),
        oldest_wait_ms: waits.length ? Math.max(...waits) : null,
        devices_online: deviceIds.length,
        devices_busy: [...states.values()].filter((s) => s.task !== null).length,
        lines: lineStates.filter((l) => l.waiting > 0),
      });
    }
    return result;
  }
}
