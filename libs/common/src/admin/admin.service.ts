import { z } from 'zod';
import { AppError } from '../errors/app-error';
import { newApiKey, newDeviceToken } from '../keys/keys';
import type { PrismaClient } from '../prisma/generated/client';
import { Prisma } from '../prisma/generated/client';
import { parseTaskAddress, taskView } from '../tasks/task-address';

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
/** Model ids as catalogs spell them: `llama3.2:3b`, `bartowski/Llama-3.2-3B-Instruct-GGUF:Q4_K_M`. */
const MODEL_ID = /^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const DURATION = /^([1-9][0-9]{0,5})(s|m|h|d)$/;
const UNIT_MS = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
/** Ten years: a longer expiry is a mistake, not a policy. */
const MAX_EXPIRY_MS = 3650 * UNIT_MS.d;

export const orgNameSchema = z
  .string()
  .regex(NAME, 'must be 1-64 characters: letters, digits, ".", "_" or "-", starting with a letter or digit');
export const modelIdSchema = z
  .string()
  .regex(MODEL_ID, 'must be 1-200 characters without spaces: letters, digits and . _ : / @ + -');
const labelSchema = z.string().min(1).max(100);
const deviceNameSchema = z.string().trim().min(1).max(64);
const maxOutputTokensSchema = z.number().int().min(1).max(1_000_000);
const ownedBySchema = z.string().min(1).max(64);

/** Parses `30d`, `12h`, `45m`, `90s` into milliseconds. */
export function parseDuration(value: string): number | null {
  const match = DURATION.exec(value);
  if (!match) {
    return null;
  }
  return Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS];
}

function check<T>(schema: z.ZodType<T>, value: unknown, param: string): T {
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    throw new AppError('invalid_request', `${param} ${parsed.error.issues[0]?.message ?? 'is invalid'}`, param);
  }
  return parsed.data;
}

const iso = (d: Date | null): string | null => (d ? d.toISOString() : null);

const limitsJson = (o: { rpmLimit: number | null; concurrencyLimit: number | null; maxQueued: number | null }) => ({
  rpm: o.rpmLimit,
  concurrency: o.concurrencyLimit,
  max_queued: o.maxQueued,
});

function isUniqueViolation(error: unknown): boolean {
  return error instanceof Prisma.PrismaClientKnownRequestError && error.code === 'P2002';
}

export interface CreateKeyInput {
  org: string;
  label?: string;
  expiresIn?: string;
}

/** New limits of an org: a number sets it, null removes it (unlimited), undefined leaves it as it is. */
export interface LimitsInput {
  rpm?: number | null;
  concurrency?: number | null;
  maxQueued?: number | null;
}

const limitSchema = z.number().int().min(1).max(1_000_000_000).nullable();

export interface AddModelInput {
  id: string;
  maxOutputTokens?: number;
  ownedBy?: string;
}

/**
 * The operators' operations, shared by the admin CLI and the admin HTTP API. Inputs are checked
 * here, so both front ends refuse the same things with the same messages, and a refused call
 * changes nothing.
 */
export class AdminService {
  constructor(private readonly db: PrismaClient) {}

  private async orgByName(name: string) {
    const org = await this.db.organization.findUnique({ where: { name: check(orgNameSchema, name, 'org') } });
    if (!org) {
      throw new AppError('org_not_found', `organization '${name}' does not exist`, 'org');
    }
    return org;
  }

  async createOrg(name: string) {
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
    const org = await this.orgByName(orgName);
    const row = await this.db.organization.update({ where: { id: org.id }, data });
    return { id: row.id, name: row.name, limits: limitsJson(row) };
  }

  async listOrgs() {
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

  async createKey(input: CreateKeyInput) {
    const label = input.label === undefined ? null : check(labelSchema, input.label, 'label');
    let lifetimeMs: number | null = null;
    if (input.expiresIn !== undefined) {
      const ms = parseDuration(String(input.expiresIn));
      if (ms === null || ms > MAX_EXPIRY_MS) {
        throw new AppError(
          'invalid_request',
          'expires_in must be a number followed by s, m, h or d (e.g. 30d), at most 3650d',
          'expires_in',
        );
      }
      lifetimeMs = ms;
    }
    const org = await this.orgByName(input.org);
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

  async listKeys(orgName: string) {
    const org = await this.orgByName(orgName);
    const keys = await this.db.apiKey.findMany({ where: { orgId: org.id }, orderBy: { createdAt: 'asc' } });
    const now = Date.now();
    return keys.map((k) => ({
      id: k.id,
      prefix: k.prefix,
      label: k.label,
      status: k.revokedAt ? 'revoked' : k.expiresAt && k.expiresAt.getTime() <= now ? 'expired' : 'active',
      created_at: iso(k.createdAt),
      expires_at: iso(k.expiresAt),
      revoked_at: iso(k.revokedAt),
    }));
  }

  async revokeKey(id: string) {
    const key = UUID.test(id) ? await this.db.apiKey.findUnique({ where: { id } }) : null;
    if (!key) {
      throw new AppError('key_not_found', `API key '${id}' does not exist`, 'id');
    }
    // Revoking twice keeps the first revocation time.
    const row = key.revokedAt ? key : await this.db.apiKey.update({ where: { id }, data: { revokedAt: new Date() } });
    return { id: row.id, prefix: row.prefix, revoked_at: iso(row.revokedAt) };
  }

  async addModel(input: AddModelInput) {
    const id = check(modelIdSchema, input.id, 'id');
    const maxOutputTokens =
      input.maxOutputTokens === undefined
        ? null
        : check(maxOutputTokensSchema, input.maxOutputTokens, 'max_output_tokens');
    const ownedBy = input.ownedBy === undefined ? undefined : check(ownedBySchema, input.ownedBy, 'owned_by');
    try {
      const model = await this.db.model.create({ data: { id, maxOutputTokens, ownedBy } });
      return this.modelJson(model);
    } catch (error) {
      if (isUniqueViolation(error)) {
        throw new AppError('conflict', `model '${id}' already exists`, 'id');
      }
      throw error;
    }
  }

  private modelJson(m: { id: string; maxOutputTokens: number | null; ownedBy: string; createdAt: Date }) {
    return { id: m.id, max_output_tokens: m.maxOutputTokens, owned_by: m.ownedBy, created_at: iso(m.createdAt) };
  }

  async listModels() {
    const models = await this.db.model.findMany({
      orderBy: { id: 'asc' },
      include: { orgs: { include: { org: { select: { name: true } } } } },
    });
    return models.map((m) => ({ ...this.modelJson(m), enabled_for: m.orgs.map((o) => o.org.name).sort() }));
  }

  private async modelById(id: string) {
    const model = MODEL_ID.test(id) ? await this.db.model.findUnique({ where: { id } }) : null;
    if (!model) {
      throw new AppError('model_not_found', `model '${id}' does not exist`, 'model');
    }
    return model;
  }

  async enableModel(modelId: string, orgName: string) {
    const org = await this.orgByName(orgName);
    const model = await this.modelById(modelId);
    await this.db.orgModel.upsert({
      where: { orgId_modelId: { orgId: org.id, modelId: model.id } },
      create: { orgId: org.id, modelId: model.id },
      update: {},
    });
    return { model: model.id, org: org.name, enabled: true };
  }

  async disableModel(modelId: string, orgName: string) {
    const org = await this.orgByName(orgName);
    const model = await this.modelById(modelId);
    await this.db.orgModel.deleteMany({ where: { orgId: org.id, modelId: model.id } });
    return { model: model.id, org: org.name, enabled: false };
  }

  async createDevice(name: string, orgName?: string) {
    const valid = check(deviceNameSchema, name, 'name');
    const org = orgName === undefined ? null : await this.orgByName(orgName);
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

  async listDevices() {
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

  async revokeDevice(id: string) {
    const device = UUID.test(id) ? await this.db.device.findUnique({ where: { id } }) : null;
    if (!device) {
      throw new AppError('device_not_found', `device '${id}' does not exist`, 'id');
    }
    const row = device.revokedAt
      ? device
      : await this.db.device.update({ where: { id }, data: { revokedAt: new Date() } });
    return { id: row.id, name: row.name, revoked_at: iso(row.revokedAt) };
  }

  async showTask(address: string) {
    const parsed = parseTaskAddress(address);
    const task = parsed ? await this.db.task.findUnique({ where: { address }, include: { org: true } }) : null;
    if (!task) {
      throw new AppError('task_not_found', `task '${address}' does not exist`, 'task_address');
    }
    return { ...taskView(task), org: task.org.name, api_key_id: task.apiKeyId };
  }
}
