import { Inject, Injectable } from '@nestjs/common';
import type { OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { LOGGER, PRESENCE_TTL_MS, encodePresenceMember, Announcements } from '@app/common';
import type { Logger } from '@app/common';
import { RedisBatch } from '../infra/redis-batch';
import type { DeviceSession } from './device-session';

/** Entries are renewed every third of their lifetime, a tenth of the devices at a time. */
const RENEW_MS = PRESENCE_TTL_MS / 3;
const RENEW_SLICES = 10;

/** A (pool, model) of presence: its key and the message that tells apis it changed (`pool model`). */
interface Place {
  key: string;
  /** The presence change message of the (pool, model) (Announcements.presenceMessage). */
  topic: string;
  /** Its channel. */
  channel: string;
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
  private slice = 0;
  /** What this dispatcher last wrote per device, to withdraw exactly that. */
  private readonly written = new Map<string, Entry[]>();
  /** One Place per (pool, model), shared by every device's entries. */
  private readonly places = new Map<string, Place>();

  constructor(
    private readonly batch: RedisBatch,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  onModuleInit(): void {
    this.timer = setInterval(() => {
      this.refreshSlice().catch((err: unknown) =>
        this.logger.warn({ err: (err as Error).message }, 'presence renewal failed; retrying at the next one'),
      );
    }, RENEW_MS / RENEW_SLICES);
    this.timer.unref();
  }

  onModuleDestroy(): void {
    if (this.timer) {
      clearInterval(this.timer);
    }
  }

  private place(pool: string, model: string): Place {
    const topic = Announcements.presenceMessage(pool, model);
    let place = this.places.get(topic);
    if (!place) {
      place = {
        key: this.batch.keys.presence(pool, model),
        topic,
        channel: this.batch.keys.presenceChannel(pool, model),
      };
      this.places.set(topic, place);
    }
    return place;
  }

  private entries(session: DeviceSession): Entry[] {
    const member = encodePresenceMember(session.id, [...session.features]);
    return session.models.map((model) => ({ place: this.place(session.pool, model), member }));
  }

  /**
   * Writes (or rewrites, after a change of models, features or availability) a device's presence.
   * Resolves once what changed is written: at once when nothing did (the entries are renewed in the
   * background), so that a re-announce of the same models is answered without a round trip.
   */
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
    for (const place of new Set([...gone, ...added].map((e) => e.place))) {
      void this.batch.publish(place.channel, place.topic);
    }
    if (gone.length === 0 && added.length === 0) {
      done.catch((err: unknown) =>
        this.logger.warn({ err: (err as Error).message, deviceId: session.id }, 'presence renewal failed'),
      );
      return Promise.resolve();
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
      void this.batch.publish(old.place.channel, old.place.topic);
    }
    return done;
  }

  /**
   * Renews one slice of the devices' entries (by position): a slice every RENEW_MS / RENEW_SLICES,
   * so that each entry is renewed every third of its lifetime without ten thousand members going
   * out in one command (which Redis runs while every other client waits) and one burst of garbage.
   */
  private async refreshSlice(): Promise<void> {
    const slice = this.slice;
    this.slice = (slice + 1) % RENEW_SLICES;
    const now = Date.now();
    const byKey = new Map<string, (string | number)[]>();
    let i = 0;
    for (const entries of this.written.values()) {
      if (i++ % RENEW_SLICES !== slice) {
        continue;
      }
      for (const entry of entries) {
        let args = byKey.get(entry.place.key);
        if (!args) {
          args = [];
          byKey.set(entry.place.key, args);
        }
        args.push(now + PRESENCE_TTL_MS, entry.member);
      }
    }
    if (byKey.size === 0) {
      return;
    }
    await this.batch.add((pipeline) => {
      for (const [key, args] of byKey) {
        pipeline.zadd(key, ...args);
        pipeline.pexpire(key, PRESENCE_TTL_MS * 2);
        // Drop entries of devices whose dispatcher died without withdrawing them.
        pipeline.zremrangebyscore(key, '-inf', now);
      }
    });
  }
}
