import { Inject, Injectable } from '@nestjs/common';
import { APP_CONFIG, LOGGER } from '@app/common';
import type { AppConfig, Logger } from '@app/common';
import { DispatcherMetrics } from '../infra/dispatcher-metrics.service';
import { CoolingOff } from './cooling-off.service';
import type { DeviceSession } from './device-session';

/** The window over which a device's invalid events are counted against DEVICE_MAX_INVALID_EVENTS. */
const STRIKE_WINDOW_MS = 60_000;

/**
 * A device's misdeeds: each invalid, foreign, unknown or over-budget event (and announce over its
 * rate) is a strike, counted in switchyard_device_invalid_events_total; DEVICE_MAX_INVALID_EVENTS of
 * them within a minute disconnect the device, and so does a single binary packet or a single frame the
 * WebSocket layer refuses (over DEVICE_MAX_EVENT_BYTES, or malformed: it closes the connection). A disconnected
 * device then cools off (CoolingOff): refused at the handshake on every dispatcher for a while that
 * grows with repeats, instead of reconnecting at once to start over.
 */
@Injectable()
export class DeviceStrikes {
  constructor(
    private readonly metrics: DispatcherMetrics,
    private readonly coolingOff: CoolingOff,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  /** Counts a misdeed; at DEVICE_MAX_INVALID_EVENTS the device is disconnected (see {@link out}). */
  strike(session: DeviceSession, reason: string): void {
    this.metrics.invalidEvents.inc({ reason });
    // Misdeeds are counted over the last STRIKE_WINDOW_MS: a long-lived device is not disconnected
    // for a few mishaps spread over days.
    const now = Date.now();
    if (now - session.firstStrikeAt > STRIKE_WINDOW_MS) {
      session.firstStrikeAt = now;
      session.invalidEvents = 0;
    }
    session.invalidEvents++;
    if (session.invalidEvents === this.config.DEVICE_MAX_INVALID_EVENTS) {
      this.out(session, 'invalid_events');
    }
  }

  /**
   * Starts the device's cooling-off, then disconnects it (its task is handled as a device drop): in that
   * order, so that no reconnect slips in before the cooling-off exists; meanwhile the gateway drops
   * whatever the device sends (`struckOut`). A binary packet disconnects at once, before socket.io's
   * decoder sees it. `binary` and `bad_frame` are counted here, being no event the protocol's decoder
   * ever passed on.
   */
  out(session: DeviceSession, why: 'invalid_events' | 'binary' | 'bad_frame'): void {
    if (session.struckOut) {
      return;
    }
    session.struckOut = true;
    if (why !== 'invalid_events') {
      this.metrics.invalidEvents.inc({ reason: why });
    }
    this.logger.warn({ deviceId: session.id, why, events: session.invalidEvents }, 'invalid events: disconnected');
    if (why === 'binary') {
      session.socket.disconnect(true);
    }
    this.coolingOff
      .begin(session.socket.data.tokenKey, session.id)
      .then(
        ({ ms, repeat }) => this.logger.warn({ deviceId: session.id, ms, repeat }, 'device cooling off'),
        (err: unknown) =>
          this.logger.error({ err: (err as Error).message, deviceId: session.id }, 'could not start a cooling-off'),
      )
      .finally(() => session.socket.disconnect(true));
  }
}
