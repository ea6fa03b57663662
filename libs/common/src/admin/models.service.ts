import { z } from 'zod';
import { AppError } from '../errors/app-error';
import type { PrismaClient } from '../prisma/generated/client';
import { MODEL_ID, check, isUniqueViolation, iso, modelIdSchema } from './admin-input';
import { findOrgByName } from './orgs.service';

export interface AddModelInput {
  id: string;
  maxOutputTokens?: number;
  ownedBy?: string;
}

const maxOutputTokensSchema = z.number().int().min(1).max(1_000_000);
const ownedBySchema = z.string().min(1).max(64);

const modelJson = (m: { id: string; maxOutputTokens: number | null; ownedBy: string; createdAt: Date }) => ({
  id: m.id,
  max_output_tokens: m.maxOutputTokens,
  owned_by: m.ownedBy,
  created_at: iso(m.createdAt),
});

/** Operators' operations on the model catalog and on which organization may use which model. */
export class AdminModelsService {
  constructor(private readonly db: PrismaClient) {}

  async add(input: AddModelInput) {
    const id = check(modelIdSchema, input.id, 'id');
    const maxOutputTokens =
      input.maxOutputTokens === undefined
        ? null
        : check(maxOutputTokensSchema, input.maxOutputTokens, 'max_output_tokens');
    const ownedBy = input.ownedBy === undefined ? undefined : check(ownedBySchema, input.ownedBy, 'owned_by');
    try {
      return modelJson(await this.db.model.create({ data: { id, maxOutputTokens, ownedBy } }));
    } catch (error) {
      if (isUniqueViolation(error)) {
        throw new AppError('conflict', `model '${id}' already exists`, 'id');
      }
      throw error;
    }
  }

  async list() {
    const models = await this.db.model.findMany({
      orderBy: { id: 'asc' },
      include: { orgs: { include: { org: { select: { name: true } } } } },
    });
    return models.map((m) => ({ ...modelJson(m), enabled_for: m.orgs.map((o) => o.org.name).sort() }));
  }

  async enable(modelId: string, orgName: string) {
    const org = await findOrgByName(this.db, orgName);
    const model = await this.byId(modelId);
    await this.db.orgModel.upsert({
      where: { orgId_modelId: { orgId: org.id, modelId: model.id } },
      create: { orgId: org.id, modelId: model.id },
      update: {},
    });
    return { model: model.id, org: org.name, enabled: true };
  }

  async disable(modelId: string, orgName: string) {
    const org = await findOrgByName(this.db, orgName);
    const model = await this.byId(modelId);
    await this.db.orgModel.deleteMany({ where: { orgId: org.id, modelId: model.id } });
    return { model: model.id, org: org.name, enabled: false };
  }

  private async byId(id: string) {
    const model = MODEL_ID.test(id) ? await this.db.model.findUnique({ where: { id } }) : null;
    if (!model) {
      throw new AppError('model_not_found', `model '${id}' does not exist`, 'model');
    }
    return model;
  }
}
