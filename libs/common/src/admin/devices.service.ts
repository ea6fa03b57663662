import { z } from 'zod';
import { AppError } from '../errors/app-error';
import { newDeviceToken } from '../keys/keys';
import { UUID, check, iso } from './admin-input';
import { findOrgByName } from './orgs.service';
import type { Sql } from './sql';

const deviceNameSchema = z.string().trim().min(1).max(64);

interface DeviceRow {
  id: string;
  name: string;
  org_id: string | null;
  token_prefix: string;
  created_at: Date;
  revoked_at: Date | null;
  last_seen_at: Date | null;
}

/** Operators' operations on devices: registration (the token is shown once), listing, revocation. */
export class AdminDevicesService {
  constructor(private readonly sql: Sql) {}

  async create(name: string, orgName?: string) {
    const valid = check(deviceNameSchema, name, 'name');
    const org = orgName === undefined ? null : await findOrgByName(this.sql, orgName);
    const token = newDeviceToken();
    const [device] = await this.sql.query<DeviceRow>(
      `INSERT INTO devices (id, name, org_id, token_hash, token_prefix) VALUES (gen_random_uuid(), $1, $2::uuid, $3, $4)
       RETURNING *`,
      [valid, org?.id ?? null, token.hash, token.prefix],
    );
    return {
      id: device.id,
      token: token.secret,
      name: device.name,
      org: org?.name ?? null,
      pool: org ? 'direct' : 'network',
      created_at: iso(device.created_at),
    };
  }

  async list() {
    const devices = await this.sql.query<DeviceRow & { org_name: string | null }>(
      `SELECT d.*, o.name AS org_name FROM devices d LEFT JOIN organizations o ON o.id = d.org_id
       ORDER BY d.created_at, d.id`,
    );
    return devices.map((d) => ({
      id: d.id,
      name: d.name,
      org: d.org_name,
      pool: d.org_id ? 'direct' : 'network',
      token_prefix: d.token_prefix,
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
