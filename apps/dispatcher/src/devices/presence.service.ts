import { Inject, Injectable } from '@nestjs/common';
import type { OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { PRESENCE_TTL_MS, encodePresenceMember, keys } from '@app/common';
import { REDIS } from '../redis.providers';
import { DeviceRegistry } from './device-registry.service';
import type { DeviceSession } from './device-session';

/**
 * Publishes which devices are online for each (pool, model), with their features, so that any api
 * instance can answer no_device_available and unsupported_by_node before queueing. Entries expire
 * on their own when a dispatcher dies; live ones are renewed every third of their lifetime.
 */
@Injectable()
export class PresenceService implements OnModuleInit, OnModuleDestroy {
  private timer: NodeJS.Timeout | null = null;
  /** What this dispatcher last wrote per device, to withdraw exactly that. */
  private readonly written = new Map<string, { key: string; member: string }[]>();

  constructor(
    @Inject(REDIS) private readonly redis: Redis,
    private readonly registry: DeviceRegistry,
  ) {}

  onModuleInit(): void {
    this.timer = setInterval(() => void this.refreshAll().catch(() => undefined), PRESENCE_TTL_MS / 3);
    this.timer.unref();
  }

  onModuleDestroy(): void {
    if (this.timer) {
      clearInterval(this.timer);
    }
  }

  private entries(session: DeviceSession) {
    const member = encodePresenceMember(session.id, [...session.features]);
    return [...session.models].map((model) => ({ key: keys.presence(session.pool, model), member }));
  }

  /** Writes (or rewrites, after a change of models or features) a device's presence. */
  async publish(session: DeviceSession): Promise<void> {
    const next = session.available ? this.entries(session) : [];
    const previous = this.written.get(session.id) ?? [];
    const expiry = Date.now() + PRESENCE_TTL_MS;
    const multi = this.redis.multi();
    for (const old of previous) {
      if (!next.some((n) => n.key === old.key && n.member === old.member)) {
        multi.zrem(old.key, old.member);
      }
    }
    for (const entry of next) {
      multi.zadd(entry.key, expiry, entry.member);
      multi.pexpire(entry.key, PRESENCE_TTL_MS * 2);
    }
    this.written.set(session.id, next);
    await multi.exec();
  }

  async withdraw(session: DeviceSession): Promise<void> {
    const previous = this.written.get(session.id) ?? [];
    this.written.delete(session.id);
    if (previous.length > 0) {
      const multi = this.redis.multi();
      for (const old of previous) {
        multi.zrem(old.key, old.member);
      }
      await multi.exec();
    }
  }

  private async refreshAll(): Promise<void> {
    const now = Date.now();
    const multi = this.redis.multi();
    for (const session of this.registry.all()) {
      for (const entry of this.written.get(session.id) ?? []) {
        multi.zadd(entry.key, now + PRESENCE_TTL_MS, entry.member);
        multi.pexpire(entry.key, PRESENCE_TTL_MS * 2);
        // Drop entries of devices whose dispatcher died without withdrawing them.
        multi.zremrangebyscore(entry.key, '-inf', now);
      }
    }
    await multi.exec();
  }
}
