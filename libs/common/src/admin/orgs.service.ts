import { z } from 'zod';
import { AppError } from '../errors/app-error';
import { check, isUniqueViolation, iso, orgNameSchema } from './admin-input';
import { OrgCompat } from '../prisma/generated/enums';
import { recordAudit } from './audit';
import type { AuditActor } from './audit';
import type { Sql } from './sql';

/**
 * New settings of an org; undefined leaves one as it is. Limits: a number sets one, null removes it
 * (unlimited). `network`: false keeps the org's prompts off the shared network. `resume`: false keeps
 * one device per answer (a task whose device is lost after output reached the client is not resumed on
 * another). `compat`: `nodea` follows the Nodea specification where it departs from OpenAI (the stop text
 * in the output, one choice counted in usage with n > 1), `openai` (the default) OpenAI. `weight`: its
 * share of a queue's assignments when several orgs wait (1-100).
 */
export interface LimitsInput {
  rpm?: number | null;
  concurrency?: number | null;
  maxQueued?: number | null;
  network?: boolean;
  resume?: boolean;
  compat?: OrgCompat;
  weight?: number;
  /** The most tokens its requests may use in a calendar month (UTC); null removes the ceiling. */
  monthlyTokenBudget?: number | null;
}

/** An organization row as the admin services read it. */
export interface OrgRow {
  id: string;
  name: string;
  created_at: Date;
  rpm_limit: number | null;
  concurrency_limit: number | null;
  max_queued: number | null;
  network: boolean;
  resume: boolean;
  compat: OrgCompat;
  weight: number;
  /** A BIGINT, which pg reads as a string. */
  monthly_token_budget: string | null;
}

const limitSchema = z.number().int().min(1).max(1_000_000_000).nullable();
const networkSchema = z.boolean();
const resumeSchema = z.boolean();
const compatSchema = z.enum(OrgCompat, { message: `must be one of ${Object.values(OrgCompat).join(', ')}` });
/** 1-100: a ratio beyond 100:1 between two orgs is not a share any more, it is a lockout. */
const weightSchema = z.number().int().min(1).max(100);

/** 0 (nothing may run) to a quadrillion, or null for none: pg's BIGINT read back as a JS number exactly. */
export const monthlyBudgetSchema = z.number().int().min(0).max(1e15).nullable();
/** A budget column as the API shows it. */
export const budgetJson = (value: string | null) => (value === null ? null : Number(value));

const limitsJson = (o: OrgRow) => ({ rpm: o.rpm_limit, concurrency: o.concurrency_limit, max_queued: o.max_queued });

/**
 * The organization with that name, or 404 org_not_found (what every admin operation on an org starts with);
 * `lock`: its row locked for the transaction `sql` is (the values a change replaces, for its audit entry).
 */
export async function findOrgByName(sql: Sql, name: string, lock = false): Promise<OrgRow> {
  const [org] = await sql.query<OrgRow>(`SELECT * FROM organizations WHERE name = $1${lock ? ' FOR UPDATE' : ''}`, [
    check(orgNameSchema, name, 'org'),
  ]);
  if (!org) {
    throw new AppError('org_not_found', `organization '${name}' does not exist`, 'org');
  }
  return org;
}

/** Operators' operations on organizations (tenants). */
export class AdminOrgsService {
  constructor(
    private readonly sql: Sql,
    private readonly actor: AuditActor | null = null,
  ) {}

  /** The same operations, with `actor` named for them in the audit log. */
  as(actor: AuditActor): AdminOrgsService {
    return new AdminOrgsService(this.sql, actor);
  }

  /** The organization with that name, or 404 org_not_found. */
  byName(name: string) {
    return findOrgByName(this.sql, name);
  }

  async create(name: string) {
    const valid = check(orgNameSchema, name, 'name');
    try {
      const org = await this.sql.transaction(async (tx) => {
        const [row] = await tx.query<OrgRow>(
          'INSERT INTO organizations (id, name) VALUES (gen_random_uuid(), $1) RETURNING *',
          [valid],
        );
        await recordAudit(tx, this.actor, { kind: 'org.create', target: row.name, before: null, after: row });
        return row;
      });
      return { id: org.id, name: org.name, created_at: iso(org.created_at) };
    } catch (error) {
      if (isUniqueViolation(error)) {
        throw new AppError('conflict', `organization '${valid}' already exists`, 'name');
      }
      throw error;
    }
  }

  /**
   * Sets an org's limits (requests per minute, concurrent requests, queued jobs per model), its network
   * and resume switches, its compat, its weight and its monthly token budget. The api reads the switches,
   * compat and budget with each key lookup (ApiKeyService); the dispatchers read the weight when a line
   * is backlogged (fair-share.ts).
   */
  async setLimits(orgName: string, input: LimitsInput) {
    const changes: [string, number | boolean | string | null][] = [];
    if (input.rpm !== undefined) {
      changes.push(['rpm_limit', check(limitSchema, input.rpm, 'rpm')]);
    }
    if (input.concurrency !== undefined) {
      changes.push(['concurrency_limit', check(limitSchema, input.concurrency, 'concurrency')]);
    }
    if (input.maxQueued !== undefined) {
      changes.push(['max_queued', check(limitSchema, input.maxQueued, 'max_queued')]);
    }
    if (input.network !== undefined) {
      changes.push(['network', check(networkSchema, input.network, 'network')]);
    }
    if (input.resume !== undefined) {
      changes.push(['resume', check(resumeSchema, input.resume, 'resume')]);
    }
    if (input.compat !== undefined) {
      changes.push(['compat', check(compatSchema, input.compat, 'compat')]);
    }
    if (input.weight !== undefined) {
      changes.push(['weight', check(weightSchema, input.weight, 'weight')]);
    }
    if (input.monthlyTokenBudget !== undefined) {
      changes.push([
        'monthly_token_budget',
        check(monthlyBudgetSchema, input.monthlyTokenBudget, 'monthly_token_budget'),
      ]);
    }
    const set = changes.map(([column], i) => `${column} = $${i + 2}`).join(', ');
    // Nothing to set is a look (`org limits <name>`), not a change: no audit entry.
    const row = changes.length
      ? await this.sql.transaction(async (tx) => {
          const org = await findOrgByName(tx, orgName, true);
          const [after] = await tx.query<OrgRow>(`UPDATE organizations SET ${set} WHERE id = $1::uuid RETURNING *`, [
            org.id,
            ...changes.map(([, value]) => value),
          ]);
          await recordAudit(tx, this.actor, { kind: 'org.update', target: org.name, before: org, after });
          return after;
        })
      : await findOrgByName(this.sql, orgName);
    return {
      id: row.id,
      name: row.name,
      limits: limitsJson(row),
      network: row.network,
      resume: row.resume,
      compat: row.compat,
      weight: row.weight,
      monthly_token_budget: budgetJson(row.monthly_token_budget),
    };
  }

  async list() {
    const orgs = await this.sql.query<OrgRow & { active_keys: unknown; models: unknown; devices: unknown }>(
      `SELECT o.*,
         (SELECT count(*) FROM api_keys k WHERE k.org_id = o.id AND k.revoked_at IS NULL
            AND (k.expires_at IS NULL OR k.expires_at > now())) AS active_keys,
         (SELECT count(*) FROM org_models m WHERE m.org_id = o.id) AS models,
         (SELECT count(*) FROM devices d WHERE d.org_id = o.id) AS devices
       FROM organizations o ORDER BY o.name`,
    );
    return orgs.map((o) => ({
      id: o.id,
      name: o.name,
      created_at: iso(o.created_at),
      limits: limitsJson(o),
      network: o.network,
      resume: o.resume,
      compat: o.compat,
      weight: o.weight,
      monthly_token_budget: budgetJson(o.monthly_token_budget),
      active_keys: Number(o.active_keys),
      models: Number(o.models),
      devices: Number(o.devices),
    }));
  }
}
