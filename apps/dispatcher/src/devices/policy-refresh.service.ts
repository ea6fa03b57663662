import { Inject, Injectable } from '@nestjs/common';
import type { OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { LOGGER } from '@app/common';
import type { Logger } from '@app/common';
import { AnnouncePolicy } from './announce-policy.service';
import type { AnnounceDecision } from './announce-policy.service';
import { DeviceRegistry } from './device-registry.service';
import type { DeviceSession } from './device-session';
import { DeviceServing } from './device-serving.service';

/** How often a slice of the connected devices has its models checked again. */
const TICK_MS = 1_000;
/** Devices per check: one query for all of them. */
const SLICE = 500;

/**
 * What a device may serve changes without the device: an admin adds a model to the catalog, enables
 * or disables it for an org, restricts a device, pins a model's digests, quarantines or trusts a device,
 * registers a model's first canary or removes its last. Every connected device's announced models are
 * checked again in turn (a slice per second, one query per slice), and a change is served as an
 * announce would be (DeviceServing).
 */
@Injectable()
export class PolicyRefresh implements OnModuleInit, OnModuleDestroy {
  private timer: NodeJS.Timeout | null = null;
  /** Where the last slice ended: a live iterator over the registry, not a copy of it every second. */
  private cursor: IterableIterator<DeviceSession> | null = null;
  private running = false;

  constructor(
    private readonly registry: DeviceRegistry,
    private readonly policy: AnnouncePolicy,
    private readonly serving: DeviceServing,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  onModuleInit(): void {
    this.timer = setInterval(() => void this.tick(), TICK_MS);
    this.timer.unref();
  }

  onModuleDestroy(): void {
    if (this.timer) {
      clearInterval(this.timer);
    }
  }

  private async tick(): Promise<void> {
    if (this.running || this.registry.size === 0) {
      return;
    }
    this.running = true;
    try {
      const slice = this.nextSlice();
      const decisions = await this.policy.decideMany(
        slice.map((session) => ({ session, models: session.announcedModels, identities: session.identities })),
      );
      slice.forEach((session, i) => this.apply(session, decisions[i]));
    } catch (err) {
      this.logger.warn({ err: (err as Error).message }, 'could not check devices’ models again; retrying');
    } finally {
      this.running = false;
    }
  }

  /** Checks one device's models again now (its trust changed here), as a slice would in turn. */
  async recheck(session: DeviceSession): Promise<void> {
    const [decision] = await this.policy.decideMany([
      { session, models: session.announcedModels, identities: session.identities },
    ]);
    this.apply(session, decision);
  }

  /** The next SLICE announced devices after the last slice; fewer at the end of the registry, then from its start. */
  private nextSlice(): DeviceSession[] {
    const slice: DeviceSession[] = [];
    this.cursor ??= this.registry.all();
    for (let next = this.cursor.next(); ; next = this.cursor.next()) {
      if (next.done) {
        this.cursor = null;
        return slice;
      }
      if (next.value.announced) {
        slice.push(next.value);
        if (slice.length === SLICE) {
          return slice;
        }
      }
    }
  }

  private apply(session: DeviceSession, { models, held }: AnnounceDecision): void {
    const same =
      held === session.held &&
      models.length === session.models.length &&
      models.every((m) => session.models.includes(m));
    if (same || this.registry.get(session.id) !== session) {
      return;
    }
    this.logger.info({ deviceId: session.id, models, held }, 'the models a device may serve changed');
    void this.serving.serve(session, models, [...session.features], session.available, held);
  }
}
