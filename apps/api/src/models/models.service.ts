import { Injectable } from '@nestjs/common';
import { AppError, PrismaService } from '@app/common';

export interface ModelObject {
  id: string;
  object: 'model';
  created: number;
  owned_by: string;
}

const toObject = (m: { id: string; createdAt: Date; ownedBy: string }): ModelObject => ({
  id: m.id,
  object: 'model',
  created: Math.floor(m.createdAt.getTime() / 1000),
  owned_by: m.ownedBy,
});

/** The models an organization may use. Every query is scoped by the caller's org id. */
@Injectable()
export class ModelsService {
  constructor(private readonly prisma: PrismaService) {}

  /** The catalog rows of the models enabled for the org. */
  async listRows(orgId: string) {
    const rows = await this.prisma.client.orgModel.findMany({
      where: { orgId },
      include: { model: true },
      orderBy: { modelId: 'asc' },
    });
    return rows.map((r) => r.model);
  }

  async list(orgId: string): Promise<ModelObject[]> {
    return (await this.listRows(orgId)).map(toObject);
  }

  /** The model if it is enabled for the org; otherwise 404, whether or not it exists elsewhere. */
  async get(orgId: string, modelId: string) {
    const row = await this.prisma.client.orgModel.findUnique({
      where: { orgId_modelId: { orgId, modelId } },
      include: { model: true },
    });
    if (!row) {
      throw new AppError(
        'model_not_found',
        `The model '${modelId}' does not exist or you do not have access to it.`,
        'model',
      );
    }
    return row.model;
  }

  async retrieve(orgId: string, modelId: string): Promise<ModelObject> {
    return toObject(await this.get(orgId, modelId));
  }
}
