import { z } from 'zod';
import { AppError } from '../errors/app-error';
import { ModelKind } from '../prisma/generated/enums';
import { MODEL_DIGEST } from '../protocol/messages';
import { MODEL_ID, check, isUniqueViolation, iso, modelIdSchema } from './admin-input';
import { recordAudit } from './audit';
import type { AuditActor } from './audit';
import { findOrgByName } from './orgs.service';
import type { Sql } from './sql';

export interface AddModelInput {
  id: string;
  /** What it answers: `chat` (the default) or `embedding`. */
  kind?: ModelKind;
  maxOutputTokens?: number;
  ownedBy?: string;
  /** Served by network devices too; default false (only the direct devices of its orgs). */
  network?: boolean;
}

/** What an admin may change of a catalog model; fields left out keep their value. */
export interface UpdateModelInput {
  kind?: ModelKind;
  /** null removes the bound. */
  maxOutputTokens?: number | null;
  ownedBy?: string;
  network?: boolean;
  /** The digests devices may serve it with; [] removes the pin (any device, with a digest or none). */
  allowedDigests?: string[];
}

interface ModelRow {
  id: string;
  kind: ModelKind;
  max_output_tokens: number | null;
  owned_by: string;
  network: boolean;
  allowed_digests: string[] | null;
  created_at: Date;
}

const kindSchema = z.enum(ModelKind, { message: `must be one of ${Object.values(ModelKind).join(', ')}` });
const maxOutputTokensSchema = z.number().int().min(1).max(1_000_000);
const ownedBySchema = z.string().min(1).max(64);
/** At most this many digests per model: a few builds or quantizations of the same weights. */
export const MAX_ALLOWED_DIGESTS = 32;
const allowedDigestsSchema = z
  .array(z.string().regex(MODEL_DIGEST, 'must hold digests written sha256:<64 lowercase hex digits>'))
  .max(MAX_ALLOWED_DIGESTS, `may hold at most ${MAX_ALLOWED_DIGESTS} digests`);

const modelJson = (m: ModelRow) => ({
  id: m.id,
  kind: m.kind,
  max_output_tokens: m.max_output_tokens,
  owned_by: m.owned_by,
  network: m.network,
  allowed_digests: m.allowed_digests ?? [],
  created_at: iso(m.created_at),
});

/** Operators' operations on the model catalog and on which organization may use which model. */
export class AdminModelsService {
  constructor(
    private readonly sql: Sql,
    private readonly actor: AuditActor | null = null,
  ) {}

  /** The same operations, with `actor` named for them in the audit log. */
  as(actor: AuditActor): AdminModelsService {
    return new AdminModelsService(this.sql, actor);
  }

  async add(input: AddModelInput) {
    const id = check(modelIdSchema, input.id, 'id');
    const kind = input.kind === undefined ? null : check(kindSchema, input.kind, 'kind');
    const maxOutputTokens =
      input.maxOutputTokens === undefined
        ? null
        : check(maxOutputTokensSchema, input.maxOutputTokens, 'max_output_tokens');
    const ownedBy = input.ownedBy === undefined ? null : check(ownedBySchema, input.ownedBy, 'owned_by');
    try {
      const row = await this.sql.transaction(async (tx) => {
        const [added] = await tx.query<ModelRow>(
          `INSERT INTO models (id, max_output_tokens, owned_by, network, kind)
           VALUES ($1, $2::int, coalesce($3, 'switchyard'), $4, coalesce($5::model_kind, 'chat')) RETURNING *`,
          [id, maxOutputTokens, ownedBy, input.network ?? false, kind],
        );
        await recordAudit(tx, this.actor, { kind: 'model.add', target: added.id, before: null, after: added });
        return added;
      });
      return modelJson(row);
    } catch (error) {
      if (isUniqueViolation(error)) {
        throw new AppError('conflict', `model '${id}' already exists`, 'id');
      }
      throw error;
    }
  }

  async update(modelId: string, input: UpdateModelInput) {
    const model = await this.byId(modelId);
    const kind = input.kind === undefined ? null : check(kindSchema, input.kind, 'kind');
    const maxOutputTokens =
      input.maxOutputTokens === undefined || input.maxOutputTokens === null
        ? input.maxOutputTokens
        : check(maxOutputTokensSchema, input.maxOutputTokens, 'max_output_tokens');
    const ownedBy = input.ownedBy === undefined ? undefined : check(ownedBySchema, input.ownedBy, 'owned_by');
    const digests =
      input.allowedDigests === undefined
        ? null
        : [...new Set(check(allowedDigestsSchema, input.allowedDigests, 'allowed_digests'))].sort();
    const row = await this.sql.transaction(async (tx) => {
      // Locked: the entry's "before" is what this change replaced.
      const [before] = await tx.query<ModelRow>('SELECT * FROM models WHERE id = $1 FOR UPDATE', [model.id]);
      const [after] = await tx.query<ModelRow>(
        `UPDATE models SET
           max_output_tokens = CASE WHEN $2 THEN $3::int ELSE max_output_tokens END,
           owned_by = coalesce($4, owned_by),
           network = coalesce($5, network),
           allowed_digests = coalesce($6::text[], allowed_digests),
           kind = coalesce($7::model_kind, kind)
         WHERE id = $1 RETURNING *`,
        [
          model.id,
          maxOutputTokens !== undefined,
          maxOutputTokens ?? null,
          ownedBy ?? null,
          input.network ?? null,
          digests,
          kind,
        ],
      );
      await recordAudit(tx, this.actor, { kind: 'model.update', target: model.id, before, after });
      return after;
    });
    return modelJson(row);
  }

  async list() {
    const models = await this.sql.query<ModelRow & { enabled_for: string[] | null }>(
      `SELECT m.*, (SELECT array_agg(o.name) FROM org_models om JOIN organizations o ON o.id = om.org_id
                     WHERE om.model_id = m.id) AS enabled_for
       FROM models m ORDER BY m.id`,
    );
    return models.map((m) => ({ ...modelJson(m), enabled_for: (m.enabled_for ?? []).sort() }));
  }

  async enable(modelId: string, orgName: string) {
    const org = await findOrgByName(this.sql, orgName);
    const model = await this.byId(modelId);
    await this.sql.transaction(async (tx) => {
      const added = await tx.query(
        `INSERT INTO org_models (org_id, model_id) VALUES ($1::uuid, $2) ON CONFLICT (org_id, model_id) DO NOTHING
         RETURNING model_id`,
        [org.id, model.id],
      );
      await recordAudit(tx, this.actor, {
        kind: 'model.enable',
        // As its route names it: /admin/orgs/{org}/models/{model} (an org's name holds no '/').
        target: `${org.name}/${model.id}`,
        before: { org: org.name, model: model.id, enabled: added.length === 0 },
        after: { org: org.name, model: model.id, enabled: true },
      });
    });
    return { model: model.id, org: org.name, enabled: true };
  }

  async disable(modelId: string, orgName: string) {
    const org = await findOrgByName(this.sql, orgName);
    const model = await this.byId(modelId);
    await this.sql.transaction(async (tx) => {
      const removed = await tx.query(
        'DELETE FROM org_models WHERE org_id = $1::uuid AND model_id = $2 RETURNING model_id',
        [org.id, model.id],
      );
      await recordAudit(tx, this.actor, {
        kind: 'model.disable',
        // As its route names it: /admin/orgs/{org}/models/{model} (an org's name holds no '/').
        target: `${org.name}/${model.id}`,
        before: { org: org.name, model: model.id, enabled: removed.length > 0 },
        after: { org: org.name, model: model.id, enabled: false },
      });
    });
    return { model: model.id, org: org.name, enabled: false };
  }

  private async byId(id: string) {
    const [model] = MODEL_ID.test(id) ? await this.sql.query<ModelRow>('SELECT * FROM models WHERE id = $1', [id]) : [];
    if (!model) {
      throw new AppError('model_not_found', `model '${id}' does not exist`, 'model');
    }
    return model;
  }
}
