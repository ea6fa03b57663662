import { z } from 'zod';
import { AppError } from '../errors/app-error';
import { UUID, check, iso, modelIdSchema } from './admin-input';
import { recordAudit } from './audit';
import type { AuditActor } from './audit';
import type { Sql } from './sql';

/** At most this many canaries per model: the dispatchers pick one at random each time. */
export const MAX_CANARIES_PER_MODEL = 100;
/** A canary's answer is short: what it proves is the model, not its stamina. */
export const MAX_CANARY_TOKENS = 1_024;

const messagesSchema = z
  .array(
    z.strictObject({
      role: z.enum(['system', 'user', 'assistant'], { message: 'role must be system, user or assistant' }),
      content: z.string().min(1, 'content must not be empty').max(8_000, 'content may hold at most 8,000 characters'),
    }),
  )
  .min(1, 'must hold at least one message')
  .max(16, 'may hold at most 16 messages')
  .refine((m) => m.length === 0 || m[m.length - 1].role === 'user', 'must end with a user message');
const maxTokensSchema = z.number().int().min(1).max(MAX_CANARY_TOKENS);
const expectText = z.string().min(1, 'must not be empty').max(2_000, 'may hold at most 2,000 characters');
const expectSchema = z.union([z.strictObject({ equals: expectText }), z.strictObject({ contains: expectText })], {
  message: 'must be {"equals": text} or {"contains": text}',
});

export type CanaryMessage = z.infer<typeof messagesSchema>[number];
export type CanaryExpect = z.infer<typeof expectSchema>;

export interface CanaryInput {
  messages: unknown;
  max_tokens: unknown;
  expect: unknown;
}

/** A canary as the canaries table holds it. */
export interface CanaryRow {
  id: string;
  model_id: string;
  messages: CanaryMessage[];
  max_tokens: number;
  expect: CanaryExpect;
  created_at: Date;
}

const canaryJson = (c: CanaryRow) => ({
  id: c.id,
  model: c.model_id,
  messages: c.messages,
  max_tokens: c.max_tokens,
  expect: c.expect,
  created_at: iso(c.created_at),
});

export type CanaryRecord = ReturnType<typeof canaryJson>;

/**
 * Canary prompts (docs/operations.md, "Canaries"): per model, a prompt with a known answer that the
 * dispatchers send to network devices serving the model, as an ordinary task at temperature 0.
 */
export class AdminCanariesService {
  constructor(
    private readonly sql: Sql,
    private readonly actor: AuditActor | null = null,
  ) {}

  /** The same operations, with `actor` named for them in the audit log. */
  as(actor: AuditActor): AdminCanariesService {
    return new AdminCanariesService(this.sql, actor);
  }

  async add(model: string, input: CanaryInput): Promise<CanaryRecord> {
    const id = check(modelIdSchema, model, 'model');
    const messages = check(messagesSchema, input.messages, 'messages');
    const maxTokens = check(maxTokensSchema, input.max_tokens, 'max_tokens');
    const expect = check(expectSchema, input.expect, 'expect');
    return this.sql.transaction(async (tx) => {
      // The model's row lock counts its canaries one writer at a time.
      const [found] = await tx.query<{ n: number; kind: string }>(
        `SELECT (SELECT count(*)::int FROM canaries WHERE model_id = m.id) AS n, m.kind FROM models m WHERE m.id = $1
         FOR UPDATE`,
        [id],
      );
      if (!found) {
        throw new AppError('model_not_found', `model '${id}' is not in the catalog`, 'model');
      }
      if (found.kind !== 'chat') {
        // A canary is a chat prompt with a known answer: an embedding model answers none.
        throw new AppError('not_a_chat_model', `'${id}' is an embedding model: canaries are chat prompts`, 'model');
      }
      if (found.n >= MAX_CANARIES_PER_MODEL) {
        throw new AppError(
          'invalid_request',
          `model '${id}' has ${MAX_CANARIES_PER_MODEL} canaries already, the most it may have: remove one first`,
          'model',
        );
      }
      const [row] = await tx.query<CanaryRow>(
        `INSERT INTO canaries (id, model_id, messages, max_tokens, expect)
         VALUES (gen_random_uuid(), $1, $2::jsonb, $3, $4::jsonb) RETURNING *`,
        [id, JSON.stringify(messages), maxTokens, JSON.stringify(expect)],
      );
      await recordAudit(tx, this.actor, { kind: 'canary.add', target: row.id, before: null, after: row });
      return canaryJson(row);
    });
  }

  /** A model's canaries, oldest first; 404 when the model is not in the catalog. */
  async list(model: string): Promise<CanaryRecord[]> {
    const id = check(modelIdSchema, model, 'model');
    const [known] = await this.sql.query('SELECT 1 FROM models WHERE id = $1', [id]);
    if (!known) {
      throw new AppError('model_not_found', `model '${id}' is not in the catalog`, 'model');
    }
    const rows = await this.sql.query<CanaryRow>('SELECT * FROM canaries WHERE model_id = $1 ORDER BY created_at, id', [
      id,
    ]);
    return rows.map(canaryJson);
  }

  async remove(id: string): Promise<{ id: string; model: string; deleted: true }> {
    const row = UUID.test(id)
      ? await this.sql.transaction(async (tx) => {
          const [removed] = await tx.query<CanaryRow>('DELETE FROM canaries WHERE id = $1::uuid RETURNING *', [id]);
          if (removed) {
            await recordAudit(tx, this.actor, { kind: 'canary.remove', target: id, before: removed, after: null });
          }
          return removed;
        })
      : undefined;
    if (!row) {
      throw new AppError('canary_not_found', `canary '${id}' does not exist`, 'id');
    }
    return { id: row.id, model: row.model_id, deleted: true };
  }
}
