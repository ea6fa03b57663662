import { z } from 'zod';
import { EMBED_MAX_DIMENSIONS, EMBED_MAX_INPUTS, embedInputSchema } from '@app/common';

/**
 * The schema of POST /v1/embeddings, with OpenAI's wire names; the OpenAPI document is generated
 * from it. `input` is checked by hand in create-embedding.dto.ts (with OpenAI's messages, and without
 * zod's cost on millions of token ids), to the same rules as written here.
 */

/** A token id, as the device protocol bounds it (one schema for both, so they cannot disagree). */
export const tokenIdSchema = embedInputSchema.options[1].element.element;

const text = z.string().min(1);
const tokens = z.array(tokenIdSchema).min(1);

/** `opengpu` is the OpenGPU relay's name for the shared pool: a synonym of `network`, as on the chat routes. */
export const EMBED_MODES = ['auto', 'direct', 'network', 'opengpu'] as const;

export const createEmbeddingSchema = z.object({
  model: z.string().min(1).max(200).optional(),
  input: z.union([
    text.describe('One input'),
    z.array(text).min(1).max(EMBED_MAX_INPUTS).describe('Inputs, each embedded on its own'),
    tokens.describe('One input, as token ids'),
    z.array(tokens).min(1).max(EMBED_MAX_INPUTS).describe('Inputs as token ids'),
  ]),
  encoding_format: z.enum(['float', 'base64']).optional(),
  dimensions: z.number().int().min(1).max(EMBED_MAX_DIMENSIONS).optional(),
  mode: z.enum(EMBED_MODES).optional(),
});

export type CreateEmbeddingBody = z.infer<typeof createEmbeddingSchema>;
