import { Inject, Injectable } from '@nestjs/common';
import type { OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { LOGGER, PRESENCE_TTL_MS, encodePresenceMember, keys } from '@app/common';
import type { Logger } from '@app/common';
import { RedisBatch } from '../infra/redis-batch';
import { REDIS } from '../infra/redis.providers';
import { DeviceRegistry } from './device-registry.service';
import type { DeviceSession } from './device-session';

/** A (pool, model) of presence: its key and the message that tells apis it changed (`pool model`). */
interface Place {
  key: string;
  topic: string;
}

interface Entry {
  place: Place;
  member: string;
}

/**
 * Publishes which devices are online for each (pool, model), with their features, so that any api
 * instance can answer no_device_available and unsupported_by_node before queueing. Entries expire on
 * their own when a dispatcher dies; live ones are renewed every third of their lifetime. Every change
 * is announced on a channel, so that apis that cache presence drop what changed: once per batch of
 * background writes, so that ten thousand devices announcing at once are not ten thousand messages to
 * every api.
 */
@Injectable()
export class PresenceService implements OnModuleInit, OnModuleDestroy {
  private timer: NodeJS.Timeout | null = null;
  /** What this dispatcher last wrote per device, to withdraw exactly that. */
  private readonly written = new Map<string, Entry[]>();
  /** One Place per (pool, model), shared by every device's entries. */
  private readonly places = new Map<string, Place>();

  constructor(
    @Inject(REDIS) private readonly redis: Redis,
    private readonly batch: RedisBatch,
    private readonly registry: DeviceRegistry,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  onModuleInit(): void {
    this.timer = setInterval(() => {
      this.refreshAll().catch((err: unknown) =>
        this.logger.warn({ err: (err as Error).message }, 'presence renewal failed; retrying at the next one'),
      );
    }, PRESENCE_TTL_MS / 3);
    this.timer.unref();
  }

  onModuleDestroy(): void {
    if (this.timer) {
      clearInterval(this.timer);
    }
  }

  private place(pool: string, model: string): Place {
    const topic = `${pool} ${model}`;
    let place = this.places.get(topic);
    if (!place) {
      place = { key: keys.presence(pool, model), topic };
      this.places.set(topic, place);
    }
    return place;
  }

  private entries(session: DeviceSession): Entry[] {
    const member = encodePresenceMember(session.id, [...session.features]);
    return session.models.map((model) => ({ place: this.place(session.pool, model), member }));
  }

  /** Writes (or rewrites, after a change of models, features or availability) a device's presence. */
  publish(session: DeviceSession): Promise<void> {
    const next = session.ready ? this.entries(session) : [];
    const previous = this.written.get(session.id) ?? [];
    const same = (a: Entry, b: Entry) => a.place === b.place && a.member === b.member;
    const gone = previous.filter((old) => !next.some((n) => same(n, old)));
    const added = next.filter((entry) => !previous.some((p) => same(p, entry)));
    const expiry = Date.now() + PRESENCE_TTL_MS;
    this.written.set(session.id, next);
    const done = this.batch.add((pipeline) => {
      for (const old of gone) {
        pipeline.zrem(old.place.key, old.member);
      }
      for (const entry of next) {
        pipeline.zadd(entry.place.key, expiry, entry.member);
        pipeline.pexpire(entry.place.key, PRESENCE_TTL_MS * 2);
      }
    });
    for (const topic of new Set([...gone, ...added].map((e) => e.place.topic))) {
      void this.batch.publish(keys.presenceChannel, topic);
    }
    return done;
  }

  withdraw(session: DeviceSession): Promise<void> {
    const previous = this.written.get(session.id) ?? [];
    this.written.delete(session.id);
    if (previous.length === 0) {
      return Promise.resolve();
    }
    const done = this.batch.add((pipeline) => {
      for (const old of previous) {
        pipeline.zrem(old.place.key, old.member);
      }
    });
    for (const old of previous) {
      void this.batch.publish(keys.presenceChannel, old.place.topic);
    }
    return done;
  }

  private async refreshAll(): Promise<void> {
    const now = Date.now();
    const byKey = new Map<string, string[]>();
    for (const session of this.registry.all()) {
      for (const entry of this.written.get(session.id) ?? []) {
        let members = byKey.get(entry.place.key);
        if (!members) {
          members = [];
          byKey.set(entry.place.key, members);
        }
        members.push(entry.member);
      }
    }
    if (byKey.size === 0) {
      return;
    }
    const pipeline = this.redis.pipeline();
    for (const [key, members] of byKey) {
      pipeline.zadd(key, ...members.flatMap((m) => [now + PRESENCE_TTL_MS, m]));
      pipeline.pexpire(key, PRESENCE_TTL_MS * 2);
      // Drop entries of devices whose dispatcher died without withdrawing them.
      pipeline.zremrangebyscore(key, '-inf', now);
    }
    await pipeline.exec();
  }
}
