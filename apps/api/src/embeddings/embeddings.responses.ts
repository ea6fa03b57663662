import { z } from 'zod';
import { named } from '../openapi/components';

/** The answer of POST /v1/embeddings (embeddings.renderer.ts writes it). */
export const embeddingList = named(
  'CreateEmbeddingResponse',
  'The vectors, in input order: OpenAI’s list plus `mode` and `task_addresses` (one task per batch of inputs).',
  z.strictObject({
    object: z.literal('list'),
    data: z.array(
      z.strictObject({
        object: z.literal('embedding'),
        index: z.number().int(),
        embedding: z
          .union([z.array(z.number()), z.string()])
          .describe('float32 values; with `encoding_format: "base64"`, their bytes (little-endian) in base64'),
      }),
    ),
    model: z.string(),
    usage: z
      .strictObject({ prompt_tokens: z.number().int(), total_tokens: z.number().int() })
      .optional()
      .describe('The prompt tokens the devices reported; absent when one gave none'),
    mode: z.enum(['direct', 'network']),
    task_addresses: z.array(z.string()),
  }),
);
