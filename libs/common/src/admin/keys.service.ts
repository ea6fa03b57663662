import { z } from 'zod';
import { AppError } from '../errors/app-error';
import { newApiKey } from '../keys/keys';
import type { ApiKey, PrismaClient } from '../prisma/generated/client';
import { MAX_DURATION_MS, UUID, check, iso, parseDuration } from './admin-input';
import { findOrgByName } from './orgs.service';

export interface CreateKeyInput {
  org: string;
  label?: string;
  expiresIn?: string;
}

const labelSchema = z.string().min(1).max(100);

/** A duration option (`expires_in`) in ms; `0` only where `allowZero`. */
function durationMs(value: unknown, param: string, example: string, allowZero: boolean): number {
  const text = String(value);
  const ms = allowZero && text === '0' ? 0 : parseDuration(text);
  if (ms === null || ms > MAX_DURATION_MS) {
    throw new AppError(
      'invalid_request',
      `${param} must be ${allowZero ? '0 or ' : ''}a number followed by s, m, h or d (e.g. ${example}), at most 3650d`,
      param,
    );
  }
  return ms;
}

const keyStatus = (k: ApiKey, now: number) =>
  k.revokedAt ? 'revoked' : k.expiresAt && k.expiresAt.getTime() <= now ? 'expired' : 'active';

/** Operators' operations on API keys. A key's secret is returned once, by create; only its SHA-256 is stored. */
export class AdminKeysService {
  constructor(private readonly db: PrismaClient) {}

  async create(input: CreateKeyInput) {
    const label = input.label === undefined ? null : check(labelSchema, input.label, 'label');
    const lifetimeMs = input.expiresIn === undefined ? null : durationMs(input.expiresIn, 'expires_in', '30d', false);
    const org = await findOrgByName(this.db, input.org);
    const key = newApiKey();
    // The lifetime starts when the key exists, not when the command started.
    const expiresAt = lifetimeMs === null ? null : new Date(Date.now() + lifetimeMs);
    const row = await this.db.apiKey.create({
      data: { orgId: org.id, hash: key.hash, prefix: key.prefix, label, expiresAt },
    });
    return {
      id: row.id,
      key: key.secret,
      prefix: row.prefix,
      org: org.name,
      label: row.label,
      created_at: iso(row.createdAt),
      expires_at: iso(row.expiresAt),
    };
  }

  async list(orgName: string) {
    const org = await findOrgByName(this.db, orgName);
    const keys = await this.db.apiKey.findMany({ where: { orgId: org.id }, orderBy: { createdAt: 'asc' } });
    const now = Date.now();
    return keys.map((k) => ({
      id: k.id,
      prefix: k.prefix,
      label: k.label,
      status: keyStatus(k, now),
      created_at: iso(k.createdAt),
      expires_at: iso(k.expiresAt),
      revoked_at: iso(k.revokedAt),
    }));
  }

  async revoke(id: string) {
    const key = await this.byId(id);
    // Revoking twice keeps the first revocation time.
    const row = key.revokedAt ? key : await this.db.apiKey.update({ where: { id }, data: { revokedAt: new Date() } });
    return { id: row.id, prefix: row.prefix, revoked_at: iso(row.revokedAt) };
  }

  private async byId(id: string) {
    const key = UUID.test(id) ? await this.db.apiKey.findUnique({ where: { id } }) : null;
    if (!key) {
      throw new AppError('key_not_found', `API key '${id}' does not exist`, 'id');
    }
    return key;
  }
}
