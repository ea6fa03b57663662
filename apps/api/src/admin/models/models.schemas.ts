import { z } from 'zod';
// By path, not '@app/common': the dashboard's compiler reads these schemas without the alias.
import { ModelKind } from '../../../../../libs/common/src/prisma/generated/enums';
import { listOf, named } from '../../openapi/components';

/*
 * The bodies the catalog routes validate (strict: an unknown key is 400) and the answers they give.
 * Values are checked further by the admin services, so that the CLI and the API refuse the same things.
 */

const networkModel = z
  .boolean()
  .describe(
    'Served by network devices too (default false: only by the direct devices of the organizations it is enabled for)',
  );

const modelKind = z
  .enum(ModelKind)
  .describe(
    'What it answers: chat (the chat routes) or embedding (the embeddings routes; a chat request naming it is 400 not_a_chat_model)',
  );

export const addModelBody = z.strictObject({
  id: z.string().describe('1-200 characters: letters, digits and . _ : / @ + -'),
  kind: modelKind.optional().describe('chat (the default) or embedding: which routes serve it'),
  max_output_tokens: z.number().int().optional().describe('Upper bound for max_tokens, 1 to 1,000,000'),
  owned_by: z.string().optional().describe('owned_by as /v1/models shows it (default switchyard)'),
  network: networkModel.optional(),
});
export const updateModelBody = z.strictObject({
  kind: modelKind.optional(),
  max_output_tokens: z
    .number()
    .int()
    .nullable()
    .optional()
    .describe('Upper bound for max_tokens, 1 to 1,000,000, or null to remove it'),
  owned_by: z.string().optional().describe('owned_by as /v1/models shows it'),
  network: networkModel.optional(),
  allowed_digests: z
    .array(z.string())
    .optional()
    .describe(
      'The digests devices may serve it with (`sha256:<64 hex digits>`, at most 32), as their runtime reports them; ' +
        'a device announcing another is refused the model (digest_mismatch), one announcing none too (digest_unknown). [] removes the pin',
    ),
});

const iso = z.iso.datetime({ offset: true });
const modelFields = {
  id: z.string(),
  kind: modelKind,
  max_output_tokens: z.number().int().nullable(),
  owned_by: z.string(),
  network: z.boolean().describe('Served by network devices too; false: only by the direct devices of its orgs'),
  allowed_digests: z.array(z.string()).describe('The digests devices may serve it with; empty: no pin'),
  created_at: iso,
};

export const catalogModel = named('CatalogModel', 'A catalog model.', z.strictObject(modelFields));
export const catalogModelList = named(
  'CatalogModelList',
  'The catalog, with the organizations each model is enabled for.',
  listOf(z.strictObject({ ...modelFields, enabled_for: z.array(z.string()) })),
);
export const enablement = named(
  'ModelEnablement',
  'Whether a model is now enabled for an organization.',
  z.strictObject({ model: z.string(), org: z.string(), enabled: z.boolean() }),
);
