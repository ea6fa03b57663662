import { Inject, Injectable } from '@nestjs/common';
import { Counter } from 'prom-client';
import {
  HANDSHAKE_ERRORS,
  LOGGER,
  SERVED_PROTOCOL_VERSIONS,
  dialectOf,
  handshakeAuthSchema,
  looksLikeDeviceToken,
} from '@app/common';
import type { DeviceSocketData, HandshakeWait, Logger } from '@app/common';
import { DispatcherMetrics } from '../infra/dispatcher-metrics.service';
import { CoolingOff } from './cooling-off.service';
import { DeviceAuth } from './device-auth.service';
import { HandshakeFailures } from './handshake-failures.service';
import { tokenHashes } from './token-key';

/** A refused handshake: socket.io's connect_error `message`, and its `data` when the device should wait. */
export interface HandshakeRefusal {
  refused: string;
  data?: HandshakeWait;
}

export type HandshakeResult = DeviceSocketData | HandshakeRefusal;

/** `2 or 1`: the versions served, for the refusal's message. */
const SERVED_VERSIONS = SERVED_PROTOCOL_VERSIONS.join(' or ');

/**
 * The checks of a device's handshake, cheapest first, each refusal with its own message
 * (docs/protocol.md, Authentication):
 * 1. an address over its failed handshakes is refused before anything else (in memory);
 * 2. a token of the wrong shape is a failure of its address;
 * 3. a device cooling off is refused by its token key before any lookup (one Redis command);
 * 4. the token must be a device's: a wrong one is refused from memory (KnownCredentials), a right one is
 *    looked up in Postgres (revocation); a failure counts against the address;
 * 5. the protocol version must be one this dispatcher serves (the current one or the one before).
 */
@Injectable()
export class DeviceHandshake {
  private readonly refusals: Counter<'reason'>;

  constructor(
    private readonly auth: DeviceAuth,
    private readonly failures: HandshakeFailures,
    private readonly coolingOff: CoolingOff,
    metrics: DispatcherMetrics,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {
    this.refusals = new Counter({
      name: 'switchyard_handshake_refusals_total',
      help: 'Device handshakes refused, by reason (invalid_device_token, too_many_failed_handshakes, cooling_off, unsupported_protocol)',
      labelNames: ['reason'],
      registers: [metrics.registry],
    });
  }

  async check(raw: Record<string, unknown>, address: string): Promise<HandshakeResult> {
    const blocked = this.failures.wait(address);
    if (blocked > 0) {
      return this.wait(HANDSHAKE_ERRORS.tooManyFailures, blocked);
    }
    const auth = handshakeAuthSchema.safeParse(raw);
    if (!auth.success || !looksLikeDeviceToken(auth.data.token)) {
      return this.failed(address);
    }
    const { hash, key } = tokenHashes(auth.data.token);
    const cooling = await this.coolingOff.remaining(key);
    if (cooling > 0) {
      return this.wait(HANDSHAKE_ERRORS.coolingOff, cooling);
    }
    const device = await this.auth.identify(hash);
    if (!device) {
      return this.failed(address);
    }
    if (!dialectOf(auth.data.protocol)) {
      // The agent stops on this and says so: it needs a version this dispatcher serves.
      this.logger.warn({ deviceId: device.id, protocol: auth.data.protocol }, 'device refused: protocol version');
      this.refusals.inc({ reason: HANDSHAKE_ERRORS.protocol });
      return { refused: `${HANDSHAKE_ERRORS.protocol}: this dispatcher speaks protocol ${SERVED_VERSIONS}` };
    }
    return {
      deviceId: device.id,
      orgId: device.org_id,
      name: device.name,
      tokenKey: key,
      protocol: auth.data.protocol,
    };
  }

  /** A failure of the address: refused as a wrong token, or as over the limit when this failure went past it. */
  private async failed(address: string): Promise<HandshakeRefusal> {
    const ms = await this.failures.failed(address);
    if (ms > 0) {
      return this.wait(HANDSHAKE_ERRORS.tooManyFailures, ms);
    }
    this.refusals.inc({ reason: HANDSHAKE_ERRORS.token });
    return { refused: HANDSHAKE_ERRORS.token };
  }

  private wait(code: typeof HANDSHAKE_ERRORS.coolingOff | typeof HANDSHAKE_ERRORS.tooManyFailures, ms: number) {
    const retryAfterMs = Math.ceil(ms);
    this.refusals.inc({ reason: code });
    return { refused: `${code}: retry after ${retryAfterMs} ms`, data: { retry_after_ms: retryAfterMs } };
  }
}
