import type { Redis } from 'ioredis';
import { fairKeys } from '../queues/fair-share';
import { QUEUE_PREFIX, decodePresenceMember } from '../queues/queues';
import { keys } from '../redis/keys';

/** How long a device's live state lives without its dispatcher renewing it (it died). */
export const DEVICE_STATE_TTL_MS = 30_000;

export const liveKeys = {
  /** A connected device's live state (hash), written by its dispatcher. */
  device: (deviceId: string) => `sy:dev:${deviceId}`,
};

/** What an operator sees of a device while it is connected. */
export interface DeviceLive {
  online: boolean;
  connected_at: string | null;
  last_heartbeat_at: string | null;
  dispatcher: string | null;
  models: string[];
  features: string[];
  available: boolean | null;
  /** The task address it is serving, or null. */
  task: string | null;
}

const OFFLINE: DeviceLive = {
  online: false,
  connected_at: null,
  last_heartbeat_at: null,
  dispatcher: null,
  models: [],
  features: [],
  available: null,
  task: null,
};

const isoOf = (ms: string | undefined) => (ms ? new Date(Number(ms)).toISOString() : null);

function parseList(value: string | undefined): string[] {
  try {
    const parsed = JSON.parse(value ?? '[]') as unknown;
    return Array.isArray(parsed) ? parsed.map(String) : [];
  } catch {
    return [];
  }
}

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
 * The live state operators ask about (devices online, queues), read from what the dispatchers keep
 * in Redis. The admin HTTP API and the CLI both read it here.
 */
export class LiveState {
  constructor(private readonly redis: Redis) {}

  /** The live state of each device (offline when no dispatcher holds it). */
  async devices(ids: string[]): Promise<Map<string, DeviceLive>> {
    const out = new Map<string, DeviceLive>();
    if (ids.length === 0) {
      return out;
    }
    const pipeline = this.redis.pipeline();
    ids.forEach((id) => pipeline.hgetall(liveKeys.device(id)));
    const replies = (await pipeline.exec()) ?? [];
    ids.forEach((id, i) => {
      const h = (replies[i]?.[1] ?? {}) as Record<string, string>;
      out.set(
        id,
        h.disp
          ? {
              online: true,
              connected_at: isoOf(h.conn),
              last_heartbeat_at: isoOf(h.hb),
              dispatcher: h.disp,
              models: parseList(h.models),
              features: parseList(h.features),
              available: h.avail === '1',
              task: h.task || null,
            }
          : OFFLINE,
      );
    });
    return out;
  }

  /** Every queue that has devices online or jobs waiting, with its lines. */
  async queues(): Promise<QueueLive[]> {
    const names = new Set(await this.redis.zrange(fairKeys.backlog, 0, -1));
    const presence = new Map<string, string>();
    let cursor = '0';
    do {
      const [next, found] = await this.redis.scan(cursor, 'MATCH', 'sy:presence:*', 'COUNT', 1000);
      cursor = next;
      for (const key of found) {
        const [pool, ...model] = key.slice('sy:presence:'.length).split(':');
        const queue = `chat.${pool}.${encodeURIComponent(model.join(':')).replace(/\./g, '%2E')}`;
        names.add(queue);
        presence.set(queue, key);
      }
    } while (cursor !== '0');
    const now = Date.now();
    const result: QueueLive[] = [];
    for (const queue of [...names].sort()) {
      const [, pool, encoded] = /^chat\.([^.]+)\.(.+)$/.exec(queue) ?? [];
      const model = decodeURIComponent(encoded ?? '');
      const lines = await this.redis.zrange(fairKeys.passes(queue), 0, -1);
      const lineStates = [];
      for (const line of lines) {
        const wait = `${QUEUE_PREFIX}:${line}:wait`;
        const [waiting, oldestId] = await Promise.all([this.redis.llen(wait), this.redis.lindex(wait, -1)]);
        const added = oldestId ? await this.redis.hget(`${QUEUE_PREFIX}:${line}:${oldestId}`, 'timestamp') : null;
        lineStates.push({
          org_id: line.slice(queue.length + 1),
          waiting,
          oldest_wait_ms: added ? Math.max(0, now - Number(added)) : null,
        });
      }
      const presenceKey = presence.get(queue) ?? keys.presence(pool, model);
      const members = await this.redis.zrangebyscore(presenceKey, now, '+inf');
      const deviceIds = members.map((m) => decodePresenceMember(m).deviceId);
      const states = await this.devices(deviceIds);
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
