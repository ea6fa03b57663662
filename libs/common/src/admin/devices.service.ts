import { z } from 'zod';
import { AppError } from '../errors/app-error';
import { newDeviceToken } from '../keys/keys';
import type { PrismaClient } from '../prisma/generated/client';
import { UUID, check, iso } from './admin-input';
import { findOrgByName } from './orgs.service';

const deviceNameSchema = z.string().trim().min(1).max(64);

/** Operators' operations on devices: registration (the token is shown once), listing, revocation. */
export class AdminDevicesService {
  constructor(private readonly db: PrismaClient) {}

  async create(name: string, orgName?: string) {
    const valid = check(deviceNameSchema, name, 'name');
    const org = orgName === undefined ? null : await findOrgByName(this.db, orgName);
    const token = newDeviceToken();
    const device = await this.db.device.create({
      data: { name: valid, orgId: org?.id ?? null, tokenHash: token.hash, tokenPrefix: token.prefix },
    });
    return {
      id: device.id,
      token: token.secret,
      name: device.name,
      org: org?.name ?? null,
      pool: org ? 'direct' : 'network',
      created_at: iso(device.createdAt),
    };
  }

  async list() {
    const devices = await this.db.device.findMany({ orderBy: { createdAt: 'asc' }, include: { org: true } });
    return devices.map((d) => ({
      id: d.id,
      name: d.name,
      org: d.org?.name ?? null,
      pool: d.orgId ? 'direct' : 'network',
      token_prefix: d.tokenPrefix,
      status: d.revokedAt ? 'revoked' : 'active',
      created_at: iso(d.createdAt),
      last_seen_at: iso(d.lastSeenAt),
      revoked_at: iso(d.revokedAt),
    }));
  }

  async revoke(id: string) {
    const device = UUID.test(id) ? await this.db.device.findUnique({ where: { id } }) : null;
    if (!device) {
      throw new AppError('device_not_found', `device '${id}' does not exist`, 'id');
    }
    // Revoking twice keeps the first revocation time.
    const row = device.revokedAt
      ? device
      : await this.db.device.update({ where: { id }, data: { revokedAt: new Date() } });
    return { id: row.id, name: row.name, revoked_at: iso(row.revokedAt) };
  }
}
