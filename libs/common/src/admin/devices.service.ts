import { z } from 'zod';
import { AppError } from '../errors/app-error';
import { newDeviceToken } from '../keys/keys';
import { UUID, check, iso, modelIdSchema } from './admin-input';
import { findOrgByName } from './orgs.service';
import type { Sql } from './sql';

const deviceNameSchema = z.string().trim().min(1).max(64);
/** An admin's list of the models a device may serve (null: any model it may otherwise serve). */
const modelListSchema = z.array(modelIdSchema).min(1).max(1000).nullable();

interface DeviceRow {
  id: string;
  name: string;
  org_id: string | null;
  token_prefix: string;
  created_at: Date;
  revoked_at: Date | null;
  last_seen_at: Date | null;
  models_restricted: boolean;
}

/** Operators' operations on devices: registration (the token is shown once), listing, revocation. */
export class AdminDevicesService {
  constructor(private readonly sql: Sql) {}

  /** Registers a device; with `models`, it may serve only those (catalog models). */
  async create(name: string, orgName?: string, models?: string[] | null) {
    const valid = check(deviceNameSchema, name, 'name');
    const list = models === undefined ? null : check(modelListSchema, models, 'models');
    const org = orgName === undefined ? null : await findOrgByName(this.sql, orgName);
    const token = newDeviceToken();
    return this.sql.transaction(async (sql) => {
      const [device] = await sql.query<DeviceRow>(
        `INSERT INTO devices (id, name, org_id, token_hash, token_prefix, models_restricted)
         VALUES (gen_random_uuid(), $1, $2::uuid, $3, $4, $5) RETURNING *`,
        [valid, org?.id ?? null, token.hash, token.prefix, list !== null],
      );
      const allowed = list === null ? null : await writeModelList(sql, device.id, list);
      return {
        id: device.id,
        token: token.secret,
        name: device.name,
        org: org?.name ?? null,
        pool: org ? 'direct' : 'network',
        models: allowed,
        created_at: iso(device.created_at),
      };
    });
  }

  /**
   * Restricts a device to the listed models, or with null lifts the restriction. Connected devices
   * follow within a few seconds (the dispatchers check their devices' lists again in turn).
   */
  async setModels(id: string, models: string[] | null) {
    const list = check(modelListSchema, models, 'models');
    return this.sql.transaction(async (sql) => {
      const [row] = UUID.test(id)
        ? await sql.query<DeviceRow>('UPDATE devices SET models_restricted = $2 WHERE id = $1::uuid RETURNING *', [
            id,
            list !== null,
          ])
        : [];
      if (!row) {
        throw new AppError('device_not_found', `device '${id}' does not exist`, 'id');
      }
      const allowed = list === null ? null : await writeModelList(sql, row.id, list);
      if (list === null) {
        await sql.query('DELETE FROM device_models WHERE device_id = $1::uuid', [row.id]);
      }
      return { id: row.id, name: row.name, models: allowed };
    });
  }

  async list() {
    const devices = await this.sql.query<DeviceRow & { org_name: string | null; models: string[] | null }>(
      `SELECT d.*, o.name AS org_name,
         CASE WHEN d.models_restricted THEN
           ARRAY(SELECT dm.model_id FROM device_models dm WHERE dm.device_id = d.id ORDER BY dm.model_id)
         END AS models
       FROM devices d LEFT JOIN organizations o ON o.id = d.org_id
       ORDER BY d.created_at, d.id`,
    );
    return devices.map((d) => ({
      id: d.id,
      name: d.name,
      org: d.org_name,
      pool: d.org_id ? 'direct' : 'network',
      token_prefix: d.token_prefix,
      models: d.models,
      status: d.revoked_at ? 'revoked' : 'active',
      created_at: iso(d.created_at),
      last_seen_at: iso(d.last_seen_at),
      revoked_at: iso(d.revoked_at),
    }));
  }

  async revoke(id: string) {
    // Revoking twice keeps the first revocation time.
    const [row] = UUID.test(id)
      ? await this.sql.query<DeviceRow>(
          'UPDATE devices SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1::uuid RETURNING *',
          [id],
        )
      : [];
    if (!row) {
      throw new AppError('device_not_found', `device '${id}' does not exist`, 'id');
    }
    return { id: row.id, name: row.name, revoked_at: iso(row.revoked_at) };
  }
}

/** Replaces a device's list with `models`, which must all be in the catalog (else 404 model_not_found). */
async function writeModelList(sql: Sql, deviceId: string, models: string[]): Promise<string[]> {
  const wanted = [...new Set(models)].sort();
  const known = await sql.query<{ id: string }>('SELECT id FROM models WHERE id = ANY($1::text[])', [wanted]);
  const missing = wanted.filter((m) => !known.some((k) => k.id === m));
  if (missing.length > 0) {
    throw new AppError('model_not_found', `model '${missing[0]}' does not exist`, 'models');
  }
  await sql.query('DELETE FROM device_models WHERE device_id = $1::uuid', [deviceId]);
  await sql.query('INSERT INTO device_models (device_id, model_id) SELECT $1::uuid, unnest($2::text[])', [
    deviceId,
    wanted,
  ]);
  return wanted;
}
