import { Inject, Injectable } from '@nestjs/common';
import { APP_CONFIG, Coalescer, LOGGER, PgService, TrustStore } from '@app/common';
import type { AppConfig, Logger, ModelIdentity, RefusalReason, TrustState } from '@app/common';
import type { DeviceSession } from './device-session';

/** A device's list of models to decide, with what its runtime said of each. */
export interface AnnounceAsk {
  session: DeviceSession;
  models: readonly string[];
  identities: ReadonlyMap<string, ModelIdentity>;
  /** Only asking (a dry run): the device's trust is not touched. */
  dryRun?: boolean;
}

/** What the policy's query finds of one (device, model) pair. */
interface PolicyRow {
  known: boolean;
  network: boolean;
  enabled: boolean;
  allowed: boolean;
  /** The model's pinned digests (empty: no pin). */
  digests: string[] | null;
  /** The device's trust; null for a device deleted meanwhile. */
  trust: TrustState | null;
  /** The model has canaries. */
  canaried: boolean;
}

export interface AnnounceDecision {
  models: string[];
  refused: { model: string; reason: RefusalReason }[];
  /**
   * A network device on probation, one of whose accepted models has canaries: it is given no task
   * until it answers one. Its ack says nothing of it (the models are accepted).
   */
  held: boolean;
}

/**
 * Which of the models a device announces it may serve. A device is untrusted: it may serve only
 * catalog models; a network device only those the catalog marks for the network (a model not marked
 * is its organizations' own: its prompts never reach a stranger's device); a direct device only those
 * enabled for its organization; a device an admin restricted only those on its list; a network device
 * an operator or the dispatchers quarantined none (a direct device is never held back by trust), and one on
 * probation no task while one of its models has canaries (it is held until it answers one: the
 * canaries module; with none to answer it is trusted on announce); and a model whose
 * digests an admin pinned only with one of them, as the device's runtime reports it (the runtime's word:
 * it keeps an honest operator from serving the wrong weights by mistake, it proves nothing of a lying
 * one, docs/operations.md). Announces that arrive together are decided in one query (while
 * one runs, the next wait for it and go together): ten thousand devices announcing at once are a few
 * dozen queries, not ten thousand through a pool of ten.
 */
@Injectable()
export class AnnouncePolicy {
  private readonly announces = new Coalescer((asks: AnnounceAsk[]) => this.decideMany(asks), 0);

  constructor(
    private readonly db: PgService,
    private readonly trust: TrustStore,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  /** Null when the device announces more models than DEVICE_MAX_MODELS: the announce is refused whole. */
  async decide(
    session: DeviceSession,
    announced: readonly string[],
    identities: ReadonlyMap<string, ModelIdentity>,
    dryRun = false,
  ): Promise<AnnounceDecision | null> {
    const models = [...new Set(announced)];
    if (models.length > this.config.DEVICE_MAX_MODELS) {
      return null;
    }
    return this.announces.submit({ session, models, identities, dryRun });
  }

  /** The decisions for several devices' lists in one query (see PolicyRefresh). */
  async decideMany(asks: AnnounceAsk[]): Promise<AnnounceDecision[]> {
    const pairs = asks.flatMap((ask, i) => ask.models.map((model) => ({ i, model, ask })));
    const decisions: AnnounceDecision[] = asks.map(() => ({ models: [], refused: [], held: false }));
    if (pairs.length === 0) {
      return decisions;
    }
    const { rows } = await this.db.sql<PolicyRow & { n: string }>(
      `SELECT a.n,
         m.id IS NOT NULL AS known,
         COALESCE(m.network, false) AS network,
         m.allowed_digests AS digests,
         d.trust::text AS trust,
         EXISTS (SELECT 1 FROM canaries c WHERE c.model_id = a.model) AS canaried,
         (a.org_id IS NULL OR EXISTS (SELECT 1 FROM org_models om WHERE om.org_id = a.org_id AND om.model_id = a.model))
           AS enabled,
         (NOT COALESCE(d.models_restricted, true)
           OR EXISTS (SELECT 1 FROM device_models dm WHERE dm.device_id = a.device_id AND dm.model_id = a.model)) AS allowed
       FROM unnest($1::uuid[], $2::text[], $3::uuid[]) WITH ORDINALITY AS a(device_id, model, org_id, n)
       LEFT JOIN devices d ON d.id = a.device_id
       LEFT JOIN models m ON m.id = a.model
       ORDER BY a.n`,
      [
        pairs.map((p) => p.ask.session.id),
        pairs.map((p) => p.model),
        pairs.map((p) => p.ask.session.socket.data.orgId),
      ],
    );
    /** Per ask: on probation (a network device's), and whether an accepted model has canaries. */
    const probation = asks.map(() => ({ on: false, canaried: false }));
    for (const row of rows) {
      const pair = pairs[Number(row.n) - 1];
      const network = pair.ask.session.socket.data.orgId === null;
      const digest = pair.ask.identities.get(pair.model)?.digest ?? null;
      const reason = this.refusal(row, network, digest);
      if (reason) {
        decisions[pair.i].refused.push({ model: pair.model, reason });
        continue;
      }
      decisions[pair.i].models.push(pair.model);
      if (network && row.trust === 'probation') {
        probation[pair.i].on = true;
        probation[pair.i].canaried ||= row.canaried;
      }
    }
    const nothingToProve: string[] = [];
    probation.forEach((p, i) => {
      decisions[i].held = p.on && p.canaried;
      if (p.on && !p.canaried && !asks[i].dryRun) {
        nothingToProve.push(asks[i].session.id);
      }
    });
    // Today's behaviour where no model has canaries: the device is trusted on announce.
    await this.trust
      .trustOnAnnounce(nothingToProve)
      .catch((err: unknown) =>
        this.logger.warn(
          { err: (err as Error).message },
          'could not record devices trusted on announce; retrying later',
        ),
      );
    return decisions;
  }

  private refusal(row: PolicyRow, networkDevice: boolean, digest: string | null): RefusalReason | null {
    if (!row.known) {
      return 'unknown_model';
    }
    if (networkDevice && row.trust === 'quarantined') {
      return 'quarantined';
    }
    if (networkDevice && !row.network) {
      return 'not_network';
    }
    if (!row.enabled) {
      return 'not_enabled';
    }
    if (!row.allowed) {
      return 'not_allowed';
    }
    const pinned = row.digests ?? [];
    if (pinned.length === 0) {
      return null;
    }
    if (digest === null) {
      return 'digest_unknown';
    }
    return pinned.includes(digest) ? null : 'digest_mismatch';
  }
}
