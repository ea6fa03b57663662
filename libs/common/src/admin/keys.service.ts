import { z } from 'zod';
import { AppError } from '../errors/app-error';
import { newApiKey } from '../keys/keys';
import type { ApiKey, PrismaClient } from '../prisma/generated/client';
import { MAX_DURATION_MS, UUID, check, isNotFound, isUniqueViolation, iso, parseDuration } from './admin-input';
import { findOrgByName } from './orgs.service';

export interface CreateKeyInput {
  org: string;
  label?: string;
  expiresIn?: string;
}

export interface RotateKeyInput {
  /** How long the old key keeps working: `0` (at once) or a duration such as `24h`. Default 24 h. */
  grace?: string;
}

const labelSchema = z.string().min(1).max(100);
/** The overlap a rotation gives by default: a day is enough to roll a key out to every client. */
const DEFAULT_GRACE = '24h';

/** A duration option (`expires_in`, `grace`) in ms; `0` only where `allowZero`. */
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

/**
 * Operators' operations on API keys. A key's secret is returned once, by create and rotate; only its
 * SHA-256 is stored.
 */
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
    const keys = await this.db.apiKey.findMany({
      where: { orgId: org.id },
      orderBy: { createdAt: 'asc' },
      include: { rotatedTo: { select: { id: true } } },
    });
    const now = Date.now();
    return keys.map((k) => ({
      id: k.id,
      prefix: k.prefix,
      label: k.label,
      status: keyStatus(k, now),
      created_at: iso(k.createdAt),
      expires_at: iso(k.expiresAt),
      revoked_at: iso(k.revokedAt),
      last_used_at: iso(k.lastUsedAt),
      rotated_from: k.rotatedFromId,
      rotated_to: k.rotatedTo?.id ?? null,
    }));
  }

  async revoke(id: string) {
    const key = await this.byId(id);
    // Revoking twice keeps the first revocation time.
    const row = key.revokedAt ? key : await this.db.apiKey.update({ where: { id }, data: { revokedAt: new Date() } });
    return { id: row.id, prefix: row.prefix, revoked_at: iso(row.revokedAt) };
  }

  /**
   * Replaces a key: a new key for the same org and label (its secret returned this once), and the old
   * key expires when the grace ends, unless it already expires earlier. A key is rotated at most once
   * (the unique rotated_from_id settles two rotations at once); revoked and expired keys are not.
   */
  async rotate(id: string, input: RotateKeyInput = {}) {
    const graceMs = durationMs(input.grace ?? DEFAULT_GRACE, 'grace', '24h', true);
    const old = await this.byId(id);
    const successor = await this.db.apiKey.findUnique({ where: { rotatedFromId: old.id }, select: { id: true } });
    const now = Date.now();
    const refuse = (why: string) => new AppError('conflict', `API key '${id}' ${why}`, 'id');
    if (old.revokedAt) {
      throw refuse('is revoked and cannot be rotated; create a new key instead');
    }
    if (old.expiresAt && old.expiresAt.getTime() <= now) {
      throw refuse('has expired and cannot be rotated; create a new key instead');
    }
    if (successor) {
      throw refuse(`was already rotated (to '${successor.id}')`);
    }
    const graceEnd = new Date(now + graceMs);
    const oldExpiresAt = old.expiresAt && old.expiresAt < graceEnd ? old.expiresAt : graceEnd;
    const key = newApiKey();
    try {
      // One statement set: the new key exists exactly when the old one got its end.
      const updated = await this.db.apiKey.update({
        where: { id: old.id, revokedAt: null },
        data: {
          expiresAt: oldExpiresAt,
          rotatedTo: { create: { orgId: old.orgId, hash: key.hash, prefix: key.prefix, label: old.label } },
        },
        include: { rotatedTo: true, org: { select: { name: true } } },
      });
      const row = updated.rotatedTo!;
      return {
        id: row.id,
        key: key.secret,
        prefix: row.prefix,
        org: updated.org.name,
        label: row.label,
        created_at: iso(row.createdAt),
        expires_at: iso(row.expiresAt),
        rotated_from: updated.id,
        rotated_from_expires_at: iso(updated.expiresAt),
      };
    } catch (error) {
      if (isUniqueViolation(error)) {
        throw refuse('was already rotated');
      }
      if (isNotFound(error)) {
        // Revoked between the read and the write.
        throw refuse('is revoked and cannot be rotated; create a new key instead');
      }
      throw error;
    }
  }

  private async byId(id: string) {
    const key = UUID.test(id) ? await this.db.apiKey.findUnique({ where: { id } }) : null;
    if (!key) {
      throw new AppError('key_not_found', `API key '${id}' does not exist`, 'id');
    }
    return key;
  }
}
