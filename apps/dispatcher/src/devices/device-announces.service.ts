import { Inject, Injectable } from '@nestjs/common';
import { ANNOUNCE_LIMITS, APP_CONFIG, DEVICE_EVENTS, LOGGER } from '@app/common';
import type { AnnounceAck, AnnouncePayload, AppConfig, Logger, MessageReply, ModelIdentity } from '@app/common';
import { AnnouncePolicy } from './announce-policy.service';
import { DeviceRegistry } from './device-registry.service';
import type { DeviceSession } from './device-session';
import { DeviceServing } from './device-serving.service';
import { DeviceStrikes } from './device-strikes.service';

/**
 * A device's announces: held to their rate (before the gateway validates them), the models decided
 * (AnnouncePolicy), answered in the ack, then served (DeviceServing); a dry run (the agent's doctor)
 * is answered and changes nothing. Every refusal is answered in the ack.
 */
@Injectable()
export class DeviceAnnounces {
  constructor(
    private readonly policy: AnnouncePolicy,
    private readonly registry: DeviceRegistry,
    private readonly serving: DeviceServing,
    private readonly strikes: DeviceStrikes,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  /** Whether the device may announce now; an announce over its rate is refused in its ack, and a strike. */
  admit(session: DeviceSession, reply: MessageReply<AnnounceAck>): boolean {
    if (session.announces.take()) {
      return true;
    }
    this.logger.warn(
      { deviceId: session.id, event: DEVICE_EVENTS.announce, reason: 'announce_rate' },
      'invalid event from device: ignored',
    );
    this.strikes.strike(session, 'announce_rate');
    reply?.({
      ok: false,
      error: `too many announces: at most ${ANNOUNCE_LIMITS.burst} at once and ${ANNOUNCE_LIMITS.perSecond} a second`,
    });
    return false;
  }

  /** An announce admitted and valid (the gateway checked both). */
  async handle(session: DeviceSession, payload: AnnouncePayload, ack: MessageReply<AnnounceAck>): Promise<void> {
    const reply = ack ?? (() => undefined);
    const identities = identitiesOf(payload);
    const dryRun = payload.dry_run === true;
    let decision;
    try {
      decision = await this.policy.decide(session, payload.models, identities, dryRun);
    } catch (err) {
      this.logger.error({ err, deviceId: session.id }, 'could not check the announced models');
      reply({ ok: false, error: 'the dispatcher could not check the models; announce again' });
      return;
    }
    if (!decision) {
      this.strikes.strike(session, 'too_many_models');
      reply({ ok: false, error: `too many models: a device may announce at most ${this.config.DEVICE_MAX_MODELS}` });
      return;
    }
    if (this.registry.get(session.id) !== session) {
      return;
    }
    const accepted: AnnounceAck = {
      ok: true,
      device_id: session.id,
      pool: session.socket.data.orgId ? 'direct' : 'network',
      models: decision.models,
      refused: decision.refused,
    };
    if (dryRun) {
      // What it would get, and nothing more: the device serves what it served before.
      reply(accepted);
      return;
    }
    session.announcedModels = [...new Set(payload.models)];
    session.identities = identities;
    this.logger.info(
      {
        deviceId: session.id,
        backend: payload.backend,
        agent: payload.agent_version,
        models: decision.models,
        refused: decision.refused.length,
        digests: [...identities.values()].filter((i) => i.digest !== null).length,
        available: payload.available,
      },
      'device announced',
    );
    // Answered once the device is online for every api, before the dispatch module hears of it (serve).
    await this.serving.serve(session, decision.models, payload.features, payload.available, decision.held, () =>
      reply(accepted),
    );
  }
}

/** The announce's identities by model, for the models it announces; the first entry of a model counts. */
function identitiesOf(payload: AnnouncePayload): ReadonlyMap<string, ModelIdentity> {
  const announced = new Set(payload.models);
  const identities = new Map<string, ModelIdentity>();
  for (const identity of payload.identities) {
    if (announced.has(identity.model) && !identities.has(identity.model)) {
      identities.set(identity.model, identity);
    }
  }
  return identities;
}
