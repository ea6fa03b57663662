import { z } from 'zod';
import { AppError } from '../errors/app-error';
import { newDeviceToken } from '../keys/keys';
import { TrustStore } from '../trust/trust-store';
import type { TrustState } from '../trust/trust-store';
import { UUID, check, iso, modelIdSchema } from './admin-input';
import { recordAudit } from './audit';
import type { AuditActor } from './audit';
import { findOrgByName } from './orgs.service';
import type { Sql } from './sql';

const deviceNameSchema = z.string().trim().min(1).max(64);
/** The trust states an operator may set (docs/operations.md, "Trust"); probation is the dispatchers' to end. */
export const DEVICE_TRUST = ['trusted', 'quarantined'] as const satisfies readonly TrustState[];
export type DeviceTrust = (typeof DEVICE_TRUST)[number];
const trustSchema = z.enum(DEVICE_TRUST, { message: `must be one of ${DEVICE_TRUST.join(', ')}` });
const trustReasonSchema = z.string().trim().min(1).max(200);

/**
 * An admin's list of the models a device may serve. At least one: `null` (not an empty list) is how
 * an operator says "any model the device may otherwise serve", so an empty list is refused as the
 * likely mistake it is. 1,000 is DEVICE_MAX_MODELS's own upper bound: a longer list cannot matter.
 */
const allowedModelsSchema = z.array(modelIdSchema).min(1, 'must list at least one model (null allows any)').max(1000);

interface DeviceRow {
  id: string;
  name: string;
  org_id: string | null;
  token_prefix: string;
  created_at: Date;
  revoked_at: Date | null;
  last_seen_at: Date | null;
  models_restricted: boolean;
  trust: TrustState;
  trust_reason: string | null;
  trust_changed_at: Date | null;
  canaries_passed: number;
  canaries_failed: number;
  last_canary_at: Date | null;
}

type ListedRow = DeviceRow & { org_name: string | null; allowed: string[] | null };

const LIST_SQL = `SELECT d.*, o.name AS org_name,
    (SELECT array_agg(dm.model_id ORDER BY dm.model_id) FROM device_models dm WHERE dm.device_id = d.id) AS allowed
  FROM devices d LEFT JOIN organizations o ON o.id = d.org_id`;

/** A device as the admin API and the CLI show it (without its live state, see AdminFleetService). */
export interface DeviceRecord {
  id: string;
  name: string;
  org: string | null;
  pool: 'direct' | 'network';
  token_prefix: string;
  status: 'active' | 'revoked';
  /** The models an admin restricted it to; null: any model it may otherwise serve. */
  allowed_models: string[] | null;
  /** Whether network tasks may go to it (only when `trusted`); a direct device's is always `trusted`. */
  trust: {
    state: TrustState;
    reason: string | null;
    changed_at: string | null;
    canaries_passed: number;
    canaries_failed: number;
    last_canary_at: string | null;
  };
  created_at: string | null;
  last_seen_at: string | null;
  revoked_at: string | null;
}

/** A change of a device's trust, checked by checkTrust. */
export interface CheckedTrust {
  id: string;
  state: DeviceTrust;
  reason: string | null;
}

/** A change of trust made: the device as it is now, and the state it had. */
export interface TrustChange {
  device: DeviceRecord;
  from: TrustState;
}

const recordOf = (d: ListedRow): DeviceRecord => ({
  id: d.id,
  name: d.name,
  org: d.org_name,
  pool: d.org_id ? 'direct' : 'network',
  token_prefix: d.token_prefix,
  status: d.revoked_at ? 'revoked' : 'active',
  allowed_models: d.models_restricted ? (d.allowed ?? []) : null,
  trust: {
    state: d.trust,
    reason: d.trust_reason,
    changed_at: iso(d.trust_changed_at),
    canaries_passed: d.canaries_passed,
    canaries_failed: d.canaries_failed,
    last_canary_at: iso(d.last_canary_at),
  },
  created_at: iso(d.created_at),
  last_seen_at: iso(d.last_seen_at),
  revoked_at: iso(d.revoked_at),
});

/**
 * Operators' operations on devices: registration (the token is shown once), the models each may
 * serve, listing, revocation. The dispatchers read the restriction at announce time and check every
 * connected device again about once a second (AnnouncePolicy, PolicyRefresh).
 */
export class AdminDevicesService {
  constructor(
    private readonly sql: Sql,
    private readonly actor: AuditActor | null = null,
  ) {}

  /** The same operations, with `actor` named for them in the audit log. */
  as(actor: AuditActor): AdminDevicesService {
    return new AdminDevicesService(this.sql, actor);
  }

  async create(name: string, orgName?: string, models?: string[] | null) {
    const valid = check(deviceNameSchema, name, 'name');
    const allowed = models === undefined || models === null ? null : await this.catalogModels(models);
    const org = orgName === undefined ? null : await findOrgByName(this.sql, orgName);
    const token = newDeviceToken();
    const device = await this.sql.transaction(async (tx) => {
      const [row] = await tx.query<DeviceRow>(
        // A network device starts on probation (its first canary ends it); a direct device is trusted.
        `INSERT INTO devices (id, name, org_id, token_hash, token_prefix, models_restricted, trust)
         VALUES (gen_random_uuid(), $1, $2::uuid, $3, $4, $5,
                 CASE WHEN $2::uuid IS NULL THEN 'probation' ELSE 'trusted' END::device_trust) RETURNING *`,
        [valid, org?.id ?? null, token.hash, token.prefix, allowed !== null],
      );
      if (allowed) {
        await this.writeAllowed(tx, row.id, allowed);
      }
      const after = await this.record(tx, row.id);
      await recordAudit(tx, this.actor, { kind: 'device.create', target: row.id, before: null, after: after ?? null });
      return row;
    });
    return {
      id: device.id,
      token: token.secret,
      name: device.name,
      org: org?.name ?? null,
      pool: org ? ('direct' as const) : ('network' as const),
      allowed_models: allowed,
      created_at: iso(device.created_at),
    };
  }

  /** Restricts a device to the listed models, or (null) lifts the restriction. */
  async setModels(id: string, models: string[] | null): Promise<DeviceRecord> {
    const allowed = models === null ? null : await this.catalogModels(models);
    await this.show(id);
    await this.sql.transaction(async (tx) => {
      // The row lock orders two concurrent changes of one device: the last one wins whole.
      await tx.query('SELECT 1 FROM devices WHERE id = $1::uuid FOR UPDATE', [id]);
      const before = await this.record(tx, id);
      await tx.query('DELETE FROM device_models WHERE device_id = $1::uuid', [id]);
      await tx.query('UPDATE devices SET models_restricted = $2 WHERE id = $1::uuid', [id, allowed !== null]);
      if (allowed) {
        await this.writeAllowed(tx, id, allowed);
      }
      const after = await this.record(tx, id);
      await recordAudit(tx, this.actor, {
        kind: 'device.models',
        target: id,
        before: before ?? null,
        after: after ?? null,
      });
    });
    return this.show(id);
  }

  /**
   * Sets a network device's trust: `quarantined` takes every model from it (the dispatchers refuse it
   * them, reason `quarantined`, also while it is connected, within a few seconds), `trusted` gives them
   * back. A direct device is its organization's own and never held back by trust: 400.
   */
  async setTrust(id: string, trust: string, reason?: string): Promise<TrustChange> {
    return this.applyTrust(await this.checkTrust(id, trust, reason));
  }

  /** A change of trust checked (the device exists and is a network device), not yet made. */
  async checkTrust(id: string, trust: string, reason?: string): Promise<CheckedTrust> {
    const state = check(trustSchema, trust, 'trust');
    const why = reason === undefined ? null : check(trustReasonSchema, reason, 'reason');
    const device = await this.show(id);
    if (device.pool === 'direct') {
      throw new AppError(
        'invalid_request',
        'trust is for network devices: a direct device is its organization’s own and is never held back by it',
        'trust',
      );
    }
    return { id: device.id, state, reason: why };
  }

  async applyTrust(change: CheckedTrust): Promise<TrustChange> {
    return this.sql.transaction(async (tx) => {
      // Locked: the entry's "before" is what this change replaced.
      await tx.query('SELECT 1 FROM devices WHERE id = $1::uuid FOR UPDATE', [change.id]);
      const before = await this.record(tx, change.id);
      const from = before ? await new TrustStore(tx).set(change.id, change.state, change.reason) : null;
      const device = await this.record(tx, change.id);
      if (from === null || !device) {
        throw new AppError('device_not_found', `device '${change.id}' does not exist`, 'id');
      }
      await recordAudit(tx, this.actor, {
        kind: change.state === 'quarantined' ? 'device.quarantine' : 'device.trust',
        target: change.id,
        before: before ?? null,
        after: device,
      });
      return { device, from };
    });
  }

  async list(): Promise<DeviceRecord[]> {
    const devices = await this.sql.query<ListedRow>(`${LIST_SQL} ORDER BY d.created_at, d.id`);
    return devices.map(recordOf);
  }

  /** One device, or 404 device_not_found. */
  async show(id: string): Promise<DeviceRecord> {
    const device = await this.record(this.sql, id);
    if (!device) {
      throw new AppError('device_not_found', `device '${id}' does not exist`, 'id');
    }
    return device;
  }

  async revoke(id: string) {
    // Revoking twice keeps the first revocation time.
    const row = UUID.test(id)
      ? await this.sql.transaction(async (tx) => {
          // Locked: the entry's "before" is what this change replaced.
          await tx.query('SELECT 1 FROM devices WHERE id = $1::uuid FOR UPDATE', [id]);
          const before = await this.record(tx, id);
          const [revoked] = await tx.query<DeviceRow>(
            'UPDATE devices SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1::uuid RETURNING *',
            [id],
          );
          if (revoked) {
            const after = await this.record(tx, id);
            await recordAudit(tx, this.actor, {
              kind: 'device.revoke',
              target: id,
              before: before ?? null,
              after: after ?? null,
            });
          }
          return revoked;
        })
      : undefined;
    if (!row) {
      throw new AppError('device_not_found', `device '${id}' does not exist`, 'id');
    }
    return { id: row.id, name: row.name, revoked_at: iso(row.revoked_at) };
  }

  /** One device as the admin sees it, read on `sql` (a transaction sees its own changes); undefined when there is none. */
  private async record(sql: Sql, id: string): Promise<DeviceRecord | undefined> {
    const [row] = UUID.test(id) ? await sql.query<ListedRow>(`${LIST_SQL} WHERE d.id = $1::uuid`, [id]) : [];
    return row ? recordOf(row) : undefined;
  }

  /** The list, checked, without duplicates, sorted; every model must be in the catalog (404 model_not_found). */
  private async catalogModels(models: string[]): Promise<string[]> {
    const wanted = [...new Set(check(allowedModelsSchema, models, 'models'))].sort();
    const rows = await this.sql.query<{ id: string }>('SELECT id FROM models WHERE id = ANY($1::text[])', [wanted]);
    const known = new Set(rows.map((r) => r.id));
    const missing = wanted.find((m) => !known.has(m));
    if (missing !== undefined) {
      throw new AppError('model_not_found', `model '${missing}' is not in the catalog`, 'models');
    }
    return wanted;
  }

  private async writeAllowed(sql: Sql, deviceId: string, models: string[]): Promise<void> {
    await sql.query(
      'INSERT INTO device_models (device_id, model_id) SELECT $1::uuid, unnest($2::text[]) ON CONFLICT DO NOTHING',
      [deviceId, models],
    );
  }
}
