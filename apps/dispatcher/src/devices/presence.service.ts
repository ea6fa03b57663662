import { Inject, Injectable } from '@nestjs/common';
import type { OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { LOGGER, PRESENCE_TTL_MS, encodePresenceMember, keys } from '@app/common';
import type { Logger } from '@app/common';
import { REDIS } from '../infra/redis.providers';
import { DeviceRegistry } from './device-registry.service';
import type { DeviceSession } from './device-session';

interface Entry {
  key: string;
  member: string;
  /** `pool model`, the message that tells apis this presence changed. */
  topic: string;
}

/**
 * Publishes which devices are online for each (pool, model), with their features, so that any api
 * instance can answer no_device_available and unsupported_by_node before queueing. Entries expire on
 * their own when a dispatcher dies; live ones are renewed every third of their lifetime. Every change
 * is announced on a channel, so that apis that cache presence drop what changed.
 */
@Injectable()
export class PresenceService implements OnModuleInit, OnModuleDestroy {
  private timer: NodeJS.Timeout | null = null;
  /** What this dispatcher last wrote per device, to withdraw exactly that. */
  private readonly written = new Map<string, Entry[]>();

  constructor(
    @Inject(REDIS) private readonly redis: Redis,
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

  private entries(session: DeviceSession): Entry[] {
    const member = encodePresenceMember(session.id, [...session.features]);
    return session.models.map((model) => ({
      key: keys.presence(session.pool, model),
      member,
      topic: `${session.pool} ${model}`,
    }));
  }

  /** Writes (or rewrites, after a change of models, features or availability) a device's presence. */
  async publish(session: DeviceSession): Promise<void> {
    const next = session.ready ? this.entries(session) : [];
    const previous = this.written.get(session.id) ?? [];
    const expiry = Date.now() + PRESENCE_TTL_MS;
    const pipeline = this.redis.pipeline();
    const changed = new Set<string>();
    for (const old of previous) {
      if (!next.some((n) => n.key === old.key && n.member === old.member)) {
        pipeline.zrem(old.key, old.member);
        changed.add(old.topic);
      }
    }
    for (const entry of next) {
      pipeline.zadd(entry.key, expiry, entry.member);
      pipeline.pexpire(entry.key, PRESENCE_TTL_MS * 2);
      if (!previous.some((p) => p.key === entry.key && p.member === entry.member)) {
        changed.add(entry.topic);
      }
    }
    for (const topic of changed) {
      pipeline.publish(keys.presenceChannel, topic);
    }
    this.written.set(session.id, next);
    await pipeline.exec();
  }

  async withdraw(session: DeviceSession): Promise<void> {
    const previous = this.written.get(session.id) ?? [];
    this.written.delete(session.id);
    if (previous.length > 0) {
      const pipeline = this.redis.pipeline();
      for (const old of previous) {
        pipeline.zrem(old.key, old.member);
        pipeline.publish(keys.presenceChannel, old.topic);
      }
      await pipeline.exec();
    }
  }

  private async refreshAll(): Promise<void> {
    const now = Date.now();
    const byKey = new Map<string, string[]>();
    for (const session of this.registry.all()) {
      for (const entry of this.written.get(session.id) ?? []) {
        let members = byKey.get(entry.key);
        if (!members) {
          members = [];
          byKey.set(entry.key, members);
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
