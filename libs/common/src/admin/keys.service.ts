import { z } from 'zod';
import { AppError } from '../errors/app-error';
import { newApiKey } from '../keys/keys';
import { MAX_DURATION_MS, UUID, check, isUniqueViolation, iso, parseDuration } from './admin-input';
import { recordAudit } from './audit';
import type { AuditActor, AuditKind } from './audit';
import { budgetJson, findOrgByName, monthlyBudgetSchema } from './orgs.service';
import type { Sql } from './sql';

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

interface KeyRow {
  id: string;
  org_id: string;
  prefix: string;
  label: string | null;
  created_at: Date;
  expires_at: Date | null;
  revoked_at: Date | null;
  last_used_at: Date | null;
  rotated_from_id: string | null;
  /** A BIGINT, which pg reads as a string. */
  monthly_token_budget: string | null;
}

const keyStatus = (k: KeyRow, now: number) =>
  k.revoked_at ? 'revoked' : k.expires_at && k.expires_at.getTime() <= now ? 'expired' : 'active';

/**
 * Operators' operations on API keys. A key's secret is returned once, by create and rotate; only its
 * SHA-256 is stored.
 */
export class AdminKeysService {
  constructor(
    private readonly sql: Sql,
    private readonly actor: AuditActor | null = null,
  ) {}

  /** The same operations, with `actor` named for them in the audit log. */
  as(actor: AuditActor): AdminKeysService {
    return new AdminKeysService(this.sql, actor);
  }

  async create(input: CreateKeyInput) {
    const label = input.label === undefined ? null : check(labelSchema, input.label, 'label');
    const lifetimeMs = input.expiresIn === undefined ? null : durationMs(input.expiresIn, 'expires_in', '30d', false);
    const org = await findOrgByName(this.sql, input.org);
    const key = newApiKey();
    // The lifetime starts when the key exists, not when the command started.
    const expiresAt = lifetimeMs === null ? null : new Date(Date.now() + lifetimeMs);
    const row = await this.sql.transaction(async (tx) => {
      const [created] = await tx.query<KeyRow>(
        `INSERT INTO api_keys (id, org_id, hash, prefix, label, expires_at)
         VALUES (gen_random_uuid(), $1::uuid, $2, $3, $4, $5::timestamptz) RETURNING *`,
        [org.id, key.hash, key.prefix, label, expiresAt],
      );
      await recordAudit(tx, this.actor, {
        kind: 'key.create',
        target: created.id,
        before: null,
        after: { ...created, org: org.name },
      });
      return created;
    });
    return {
      id: row.id,
      key: key.secret,
      prefix: row.prefix,
      org: org.name,
      label: row.label,
      created_at: iso(row.created_at),
      expires_at: iso(row.expires_at),
    };
  }

  async list(orgName: string) {
    const org = await findOrgByName(this.sql, orgName);
    const keys = await this.sql.query<KeyRow & { rotated_to: string | null }>(
      `SELECT k.*, (SELECT n.id FROM api_keys n WHERE n.rotated_from_id = k.id) AS rotated_to
       FROM api_keys k WHERE k.org_id = $1::uuid ORDER BY k.created_at, k.id`,
      [org.id],
    );
    const now = Date.now();
    return keys.map((k) => ({
      id: k.id,
      prefix: k.prefix,
      label: k.label,
      status: keyStatus(k, now),
      created_at: iso(k.created_at),
      expires_at: iso(k.expires_at),
      revoked_at: iso(k.revoked_at),
      last_used_at: iso(k.last_used_at),
      rotated_from: k.rotated_from_id,
      rotated_to: k.rotated_to,
      monthly_token_budget: budgetJson(k.monthly_token_budget),
    }));
  }

  /**
   * Sets a key's monthly token budget (null removes it): a ceiling of its own within its org's, read
   * by the api with each key lookup. A revoked key may have one; it is never used again anyway.
   */
  async setBudget(id: string, budget: number | null) {
    const valid = check(monthlyBudgetSchema, budget, 'monthly_token_budget');
    const row = await this.changeKey(
      id,
      'key.budget',
      'UPDATE api_keys SET monthly_token_budget = $2 WHERE id = $1::uuid RETURNING *',
      [valid],
    );
    if (!row) {
      throw new AppError('key_not_found', `API key '${id}' does not exist`, 'id');
    }
    return {
      id: row.id,
      prefix: row.prefix,
      label: row.label,
      monthly_token_budget: budgetJson(row.monthly_token_budget),
    };
  }

  async revoke(id: string) {
    // Revoking twice keeps the first revocation time.
    const row = await this.changeKey(
      id,
      'key.revoke',
      'UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1::uuid RETURNING *',
      [],
    );
    if (!row) {
      throw new AppError('key_not_found', `API key '${id}' does not exist`, 'id');
    }
    return { id: row.id, prefix: row.prefix, revoked_at: iso(row.revoked_at) };
  }

  /**
   * Replaces a key: a new key for the same org, label and monthly token budget (its secret returned this
   * once; with the old key's lifetime, from now, when the old one had one; its spend this month counts
   * from 0, within the org's budget), and the old key expires when the grace ends,
   * unless it already expires earlier. A key is rotated at most once
   * (the unique rotated_from_id also settles two rotations at once); revoked and expired keys are not.
   */
  async rotate(id: string, input: RotateKeyInput = {}) {
    const graceMs = durationMs(input.grace ?? DEFAULT_GRACE, 'grace', '24h', true);
    const refuse = (why: string) => new AppError('conflict', `API key '${id}' ${why}`, 'id');
    const key = newApiKey();
    try {
      return await this.sql.transaction(async (sql) => {
        // Locked: a revocation or another rotation of the same key waits for this one.
        const [old] = UUID.test(id)
          ? await sql.query<KeyRow & { org_name: string; successor: string | null }>(
              `SELECT k.*, o.name AS org_name, (SELECT n.id FROM api_keys n WHERE n.rotated_from_id = k.id) AS successor
               FROM api_keys k JOIN organizations o ON o.id = k.org_id WHERE k.id = $1::uuid FOR UPDATE OF k`,
              [id],
            )
          : [];
        if (!old) {
          throw new AppError('key_not_found', `API key '${id}' does not exist`, 'id');
        }
        const now = Date.now();
        if (old.revoked_at) {
          throw refuse('is revoked and cannot be rotated; create a new key instead');
        }
        if (old.expires_at && old.expires_at.getTime() <= now) {
          throw refuse('has expired and cannot be rotated; create a new key instead');
        }
        if (old.successor) {
          throw refuse(`was already rotated (to '${old.successor}')`);
        }
        const graceEnd = new Date(now + graceMs);
        const oldExpiresAt = old.expires_at && old.expires_at < graceEnd ? old.expires_at : graceEnd;
        // A key made with a lifetime is replaced by one with the same lifetime, from now: rotation
        // renews a key, it does not turn a key that expires into one that never does.
        const expiresAt = old.expires_at ? new Date(now + (old.expires_at.getTime() - old.created_at.getTime())) : null;
        const [oldAfter] = await sql.query<KeyRow>(
          'UPDATE api_keys SET expires_at = $2::timestamptz WHERE id = $1::uuid RETURNING *',
          [old.id, oldExpiresAt],
        );
        const [row] = await sql.query<KeyRow>(
          `INSERT INTO api_keys (id, org_id, hash, prefix, label, rotated_from_id, expires_at, monthly_token_budget)
           VALUES (gen_random_uuid(), $1::uuid, $2, $3, $4, $5::uuid, $6::timestamptz, $7) RETURNING *`,
          [old.org_id, key.hash, key.prefix, old.label, old.id, expiresAt, old.monthly_token_budget],
        );
        await recordAudit(sql, this.actor, {
          kind: 'key.rotate',
          target: old.id,
          // The query's own columns left out: the entry holds the key as a key's entries do.
          before: { ...old, org_name: undefined, successor: undefined, org: old.org_name },
          after: { ...oldAfter, org: old.org_name, replacement: row },
        });
        return {
          id: row.id,
          key: key.secret,
          prefix: row.prefix,
          org: old.org_name,
          label: row.label,
          created_at: iso(row.created_at),
          expires_at: iso(row.expires_at),
          rotated_from: old.id,
          rotated_from_expires_at: iso(oldExpiresAt),
        };
      });
    } catch (error) {
      if (isUniqueViolation(error)) {
        throw refuse('was already rotated');
      }
      throw error;
    }
  }

  /**
   * One statement on one key (`$1` its id, `values` the next parameters), recorded in the audit log with the
   * key before and after it; undefined when there is no such key.
   */
  private async changeKey(id: string, kind: AuditKind, statement: string, values: unknown[]) {
    if (!UUID.test(id)) {
      return undefined;
    }
    return this.sql.transaction(async (tx) => {
      const [before] = await tx.query<KeyRow & { org: string }>(
        `SELECT k.*, o.name AS org FROM api_keys k JOIN organizations o ON o.id = k.org_id
         WHERE k.id = $1::uuid FOR UPDATE OF k`,
        [id],
      );
      if (!before) {
        return undefined;
      }
      const [after] = await tx.query<KeyRow>(statement, [id, ...values]);
      await recordAudit(tx, this.actor, { kind, target: id, before, after: { ...after, org: before.org } });
      return after;
    });
  }
}
