import { Inject, Injectable } from '@nestjs/common';
import { LOGGER } from '@app/common';
import type { Feature, Logger } from '@app/common';
import { DeviceRegistry } from './device-registry.service';
import type { DeviceSession } from './device-session';
import { DeviceStates } from './device-states.service';
import { PresenceService } from './presence.service';

/**
 * "A device now serves these models", whether it announced them (DeviceAnnounces) or what it may
 * serve changed without it (PolicyRefresh): the session takes them, its live state and its presence
 * follow, and the dispatch module hears of it (it may give the device a task at once).
 */
@Injectable()
export class DeviceServing {
  constructor(
    private readonly registry: DeviceRegistry,
    private readonly states: DeviceStates,
    private readonly presence: PresenceService,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  /** Resolves once its presence is written (a failure is logged: the next renewal writes it again). */
  serve(
    session: DeviceSession,
    models: readonly string[],
    features: readonly Feature[],
    available: boolean,
  ): Promise<void> {
    session.serve(models, features, available);
    this.states.announced(session);
    this.registry.events.onAnnounced(session);
    return this.presence
      .publish(session)
      .catch((err: unknown) =>
        this.logger.warn({ err: (err as Error).message, deviceId: session.id }, 'presence update failed'),
      );
  }
}
