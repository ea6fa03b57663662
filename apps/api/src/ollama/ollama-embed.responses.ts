import { z } from 'zod';
import { named } from '../openapi/components';

/** The answer of `/api/embed` (ollama-embed.renderer.ts writes it). */
export const ollamaEmbed = named(
  'OllamaEmbedResponse',
  'Ollama’s answer to /api/embed: one vector per input, in input order, plus `mode` and `task_addresses` (one task per batch of inputs) when something was embedded.',
  z.strictObject({
    model: z.string(),
    embeddings: z.array(z.array(z.number())),
    total_duration: z.number().int(),
    load_duration: z.number().int(),
    prompt_eval_count: z.number().int().optional().describe('The devices’ prompt tokens; absent when one gave none'),
    mode: z.enum(['direct', 'network']).optional(),
    task_addresses: z.array(z.string()).optional(),
  }),
);

/** The answer of the older `/api/embeddings`. */
export const ollamaEmbeddings = named(
  'OllamaEmbeddingsResponse',
  'Ollama’s answer to /api/embeddings: the prompt’s vector (empty for an empty prompt).',
  z.strictObject({ embedding: z.array(z.number()) }),
);
