import { z } from 'zod';
import { named } from './components';

/** The error body of every route but the Ollama-compatible ones (see common/error-body.ts). */
export const errorBody = named(
  'Error',
  'Every error under /v1, /admin and the operations routes: OpenAI’s shape. Match on `code`.',
  z.strictObject({
    error: z.strictObject({
      message: z.string(),
      type: z.string(),
      param: z.string().nullable(),
      code: z.string(),
    }),
  }),
);

/** The error body of the Ollama-compatible routes, as Ollama writes it. */
export const ollamaError = named(
  'OllamaError',
  'Errors of the Ollama-compatible /api routes.',
  z.strictObject({ error: z.string() }),
);
