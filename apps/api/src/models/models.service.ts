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

/** How long a chat request may use what an earlier one read about an org's model. */
const CHAT_CACHE_TTL_MS = 500;
/** Bounds the cache (entries are per org and enabled model). */
const CHAT_CACHE_MAX_ENTRIES = 10_000;

type ModelRow = Awaited<ReturnType<ModelsService['get']>>;

/** The models an organization may use. Every query is scoped by the caller's org id. */
@Injectable()
export class ModelsService {
  private readonly chatCache = new Map<string, { model: ModelRow; cachedAt: number }>();

  constructor(private readonly prisma: PrismaService) {}

  /**
   * `get` for the chat routes, answered from memory for CHAT_CACHE_TTL_MS: a model disabled or
   * changed by the admin takes effect on chat requests within that time (as a revoked key does).
   * Only enabled models are kept, so an unknown model always costs a query and cannot fill it.
   */
  async forChat(orgId: string, modelId: string): Promise<ModelRow> {
    const key = `${orgId}\n${modelId}`;
    const now = performance.now();
    const hit = this.chatCache.get(key);
    if (hit && now - hit.cachedAt <= CHAT_CACHE_TTL_MS) {
      return hit.model;
    }
    const model = await this.get(orgId, modelId);
    if (this.chatCache.size >= CHAT_CACHE_MAX_ENTRIES) {
      this.chatCache.clear();
    }
    this.chatCache.set(key, { model, cachedAt: now });
    return model;
  }

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
    // No model id holds NUL (Postgres cannot store it): not found, without asking.
    const row = modelId.includes('\0')
      ? null
      : await this.prisma.client.orgModel.findUnique({
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
