import { Inject, Injectable } from '@nestjs/common';
import { LOGGER } from '@app/common';
import type { Feature, Logger } from '@app/common';
import { DeviceRegistry } from './device-registry.service';
import type { DeviceSession } from './device-session';
import { DeviceStates } from './device-states.service';
import { PresenceService } from './presence.service';

/**
 * How long an announce's ack waits for the device's presence to be written. Past it (Redis slow or
 * down) the ack goes anyway: the device is served here, and the next renewal writes its presence.
 */
const PRESENCE_WAIT_MS = 1_000;

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

  /**
   * `acknowledge` (an announce's ack) runs once the presence is written, so that a request sent when
   * the device has its ack finds it online at every api; the dispatch module hears of the device
   * after it, so that a task given at once reaches the device after its ack. A failed presence write
   * is logged: the next renewal writes it again.
   */
  async serve(
    session: DeviceSession,
    models: readonly string[],
    features: readonly Feature[],
    available: boolean,
    held: boolean,
    acknowledge: () => void = () => undefined,
  ): Promise<void> {
    session.serve(models, features, available, held);
    this.states.announced(session);
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      this.presence
        .publish(session)
        .catch((err: unknown) =>
          this.logger.warn({ err: (err as Error).message, deviceId: session.id }, 'presence update failed'),
        ),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, PRESENCE_WAIT_MS);
      }),
    ]);
    clearTimeout(timer);
    acknowledge();
    if (this.registry.get(session.id) === session) {
      this.registry.events.onAnnounced(session);
    }
  }
}
