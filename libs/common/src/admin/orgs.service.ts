import { z } from 'zod';
import { AppError } from '../errors/app-error';
import type { PrismaClient } from '../prisma/generated/client';
import { check, isUniqueViolation, iso, orgNameSchema } from './admin-input';

/** New limits of an org: a number sets it, null removes it (unlimited), undefined leaves it as it is. */
export interface LimitsInput {
  rpm?: number | null;
  concurrency?: number | null;
  maxQueued?: number | null;
}

const limitSchema = z.number().int().min(1).max(1_000_000_000).nullable();

const limitsJson = (o: { rpmLimit: number | null; concurrencyLimit: number | null; maxQueued: number | null }) => ({
  rpm: o.rpmLimit,
  concurrency: o.concurrencyLimit,
  max_queued: o.maxQueued,
});

/** The organization with that name, or 404 org_not_found (what every admin operation on an org starts with). */
export async function findOrgByName(db: PrismaClient, name: string) {
  const org = await db.organization.findUnique({ where: { name: check(orgNameSchema, name, 'org') } });
  if (!org) {
    throw new AppError('org_not_found', `organization '${name}' does not exist`, 'org');
  }
  return org;
}

/** Operators' operations on organizations (tenants). */
export class AdminOrgsService {
  constructor(private readonly db: PrismaClient) {}

  /** The organization with that name, or 404 org_not_found. */
  byName(name: string) {
    return findOrgByName(this.db, name);
  }

  async create(name: string) {
    const valid = check(orgNameSchema, name, 'name');
    try {
      const org = await this.db.organization.create({ data: { name: valid } });
      return { id: org.id, name: org.name, created_at: iso(org.createdAt) };
    } catch (error) {
      if (isUniqueViolation(error)) {
        throw new AppError('conflict', `organization '${valid}' already exists`, 'name');
      }
      throw error;
    }
  }

  /** Sets an org's limits (requests per minute, concurrent requests, queued jobs per model). */
  async setLimits(orgName: string, input: LimitsInput) {
    const data = {
      ...(input.rpm !== undefined ? { rpmLimit: check(limitSchema, input.rpm, 'rpm') } : {}),
      ...(input.concurrency !== undefined
        ? { concurrencyLimit: check(limitSchema, input.concurrency, 'concurrency') }
        : {}),
      ...(input.maxQueued !== undefined ? { maxQueued: check(limitSchema, input.maxQueued, 'max_queued') } : {}),
    };
    const org = await findOrgByName(this.db, orgName);
    const row = await this.db.organization.update({ where: { id: org.id }, data });
    return { id: row.id, name: row.name, limits: limitsJson(row) };
  }

  async list() {
    const orgs = await this.db.organization.findMany({
      orderBy: { name: 'asc' },
      include: {
        _count: {
          select: {
            apiKeys: { where: { revokedAt: null, OR: [{ expiresAt: null }, { expiresAt: { gt: new Date() } }] } },
            models: true,
            devices: true,
          },
        },
      },
    });
    return orgs.map((o) => ({
      id: o.id,
      name: o.name,
      created_at: iso(o.createdAt),
      limits: limitsJson(o),
      active_keys: o._count.apiKeys,
      models: o._count.models,
      devices: o._count.devices,
    }));
  }
}
