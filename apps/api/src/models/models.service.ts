import { Injectable } from '@nestjs/common';
import { AppError, PrismaService } from '@app/common';
import type { ModelKind } from '@app/common';

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

/**
 * How long what a chat request read about an org's model is fresh; an older read is still used while
 * a new one runs in the background, up to CHAT_CACHE_STALE_MS: a chat request never waits for Postgres
 * for a model in use, and an admin's change takes effect within about that.
 */
const CHAT_CACHE_TTL_MS = 500;
const CHAT_CACHE_STALE_MS = 1_000;
const STALE_IF_ERROR_MS = 60_000;
/** Bounds the cache (entries are per org and enabled model). */
const CHAT_CACHE_MAX_ENTRIES = 10_000;

export type ModelRow = Awaited<ReturnType<ModelsService['get']>>;

interface ModelSqlRow {
  id: string;
  kind: ModelKind;
  max_output_tokens: number | null;
  owned_by: string;
  network: boolean;
  created_at: Date;
}

const MODEL_LOOKUP = `
  SELECT m.id, m.kind, m.max_output_tokens, m.owned_by, m.network, m.created_at
  FROM org_models om JOIN models m ON m.id = om.model_id
  WHERE om.org_id = $1::uuid AND om.model_id = $2`;

/** The models an organization may use. Every query is scoped by the caller's org id. */
@Injectable()
export class ModelsService {
  private readonly chatCache = new Map<string, { model: ModelRow; cachedAt: number; refreshing: boolean }>();

  constructor(private readonly prisma: PrismaService) {}

  /**
   * `get` for the chat routes, answered from memory for CHAT_CACHE_TTL_MS: a model disabled or
   * changed by the admin takes effect on chat requests within that time (as a revoked key does).
   * Only enabled models are kept, so an unknown model always costs a query and cannot fill it.
   * An embedding model is refused (400 not_a_chat_model), after the org's access to it: a model the
   * org may not use stays a 404 whatever its kind.
   */
  async forChat(orgId: string, modelId: string): Promise<ModelRow> {
    const model = await this.cachedForChat(orgId, modelId);
    if (model.kind !== 'chat') {
      throw new AppError('not_a_chat_model', `'${model.id}' is an embedding model, not a chat model.`, 'model');
    }
    return model;
  }

  /**
   * The model an embeddings request names, like forChat: a chat model is refused (400
   * not_an_embedding_model), after the org's access to it.
   */
  async forEmbedding(orgId: string, modelId: string): Promise<ModelRow> {
    const model = await this.cachedForChat(orgId, modelId);
    if (model.kind !== 'embedding') {
      throw new AppError('not_an_embedding_model', `'${model.id}' is a chat model, not an embedding model.`, 'model');
    }
    return model;
  }

  private async cachedForChat(orgId: string, modelId: string): Promise<ModelRow> {
    const key = `${orgId}\n${modelId}`;
    const hit = this.chatCache.get(key);
    const age = hit ? performance.now() - hit.cachedAt : Infinity;
    if (hit && age > CHAT_CACHE_STALE_MS && age <= STALE_IF_ERROR_MS) {
      // Postgres may be unreachable: what was read in the last minute still answers (see ApiKeyService).
      return this.load(key, orgId, modelId).catch((err: unknown) => {
        if (err instanceof AppError) {
          throw err;
        }
        return hit.model;
      });
    }
    if (hit && age <= CHAT_CACHE_STALE_MS) {
      if (age > CHAT_CACHE_TTL_MS && !hit.refreshing) {
        hit.refreshing = true;
        // A failed refresh (disabled meanwhile, or Postgres down) drops the entry: the next request asks.
        this.load(key, orgId, modelId).catch(() => this.chatCache.delete(key));
      }
      return hit.model;
    }
    return this.load(key, orgId, modelId);
  }

  private async load(key: string, orgId: string, modelId: string): Promise<ModelRow> {
    const model = await this.get(orgId, modelId);
    if (this.chatCache.size >= CHAT_CACHE_MAX_ENTRIES) {
      this.chatCache.clear();
    }
    this.chatCache.set(key, { model, cachedAt: performance.now(), refreshing: false });
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
    // Plain SQL, not Prisma: the chat routes refresh their cached models with it about twice a second,
    // and Prisma's query compiler would run on the api's one thread each time.
    const row = modelId.includes('\0')
      ? undefined
      : (await this.prisma.sql<ModelSqlRow>(MODEL_LOOKUP, [orgId, modelId])).rows[0];
    if (!row) {
      throw new AppError(
        'model_not_found',
        `The model '${modelId}' does not exist or you do not have access to it.`,
        'model',
      );
    }
    return {
      id: row.id,
      kind: row.kind,
      maxOutputTokens: row.max_output_tokens,
      ownedBy: row.owned_by,
      network: row.network,
      createdAt: row.created_at,
    };
  }

  async retrieve(orgId: string, modelId: string): Promise<ModelObject> {
    return toObject(await this.get(orgId, modelId));
  }
}
