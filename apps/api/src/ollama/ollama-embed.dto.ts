import { z } from 'zod';
import { AppError, EMBED_MAX_DIMENSIONS, EMBED_MAX_INPUTS } from '@app/common';
import { paramPath } from '../common/validation';

/**
 * Ollama's embedding routes: POST /api/embed (`input`, a string or strings) and the older POST
 * /api/embeddings (`prompt`, one string). As Ollama does, an empty input is no error: Ollama then only
 * loads the model and answers no vectors; Switchyard checks the model and answers the same, with
 * nothing queued (see ollama-embed.handler.ts).
 */

/** `opengpu` is the OpenGPU relay's name for the shared pool: a synonym of `network`, as on /api/chat. */
const mode = z.enum(['auto', 'direct', 'network', 'opengpu']).optional();
const model = z.string().min(1, 'model is required').max(200);
/** Ollama's runtime options (num_ctx, …): accepted, and without effect on a device's runtime. */
const options = z.record(z.string(), z.unknown()).optional();
const keepAlive = z.union([z.string(), z.number()]).optional();

export const embedSchema = z.object({
  model,
  input: z
    .union([z.string(), z.array(z.string().min(1)).max(EMBED_MAX_INPUTS)])
    .optional()
    .describe('One input or several; absent or empty: no vectors, and nothing queued'),
  truncate: z.boolean().optional().describe('false: an input longer than the context is refused, not cut'),
  // 0 is Ollama's "not set" (its zero value).
  dimensions: z.number().int().min(0).max(EMBED_MAX_DIMENSIONS).optional(),
  options,
  keep_alive: keepAlive,
  mode,
});

export const embeddingsSchema = z.object({
  model,
  prompt: z.string().optional().describe('The text; absent or empty: no vector, and nothing queued'),
  options,
  keep_alive: keepAlive,
  mode,
});

/** A validated /api/embed request. */
export interface OllamaEmbedRequest {
  model: string;
  mode: 'auto' | 'direct' | 'network';
  /** Empty when the client sent none: nothing to embed. */
  input: string[];
  truncate: boolean;
  dimensions?: number;
}

/** A validated /api/embeddings request. */
export interface OllamaEmbeddingsRequest {
  model: string;
  mode: 'auto' | 'direct' | 'network';
  /** Empty when the client sent none: nothing to embed. */
  prompt: string;
}

const isRecord = (v: unknown): v is Record<string, unknown> => Boolean(v) && typeof v === 'object' && !Array.isArray(v);

/** The sent fields without effect: unknown top-level ones, keep_alive, and every option (as `options.<name>`). */
function ignored(raw: unknown, known: Set<string>): string[] {
  if (!isRecord(raw)) {
    return [];
  }
  const sent = Object.keys(raw).filter((k) => raw[k] !== null);
  const opts = isRecord(raw.options) ? raw.options : {};
  return [
    ...sent.filter((k) => !known.has(k) || k === 'keep_alive'),
    ...Object.keys(opts)
      .filter((k) => opts[k] !== null)
      .map((k) => `options.${k}`),
  ];
}

const EMBED_FIELDS = new Set(['model', 'input', 'truncate', 'dimensions', 'options', 'keep_alive', 'mode']);
const EMBEDDINGS_FIELDS = new Set(['model', 'prompt', 'options', 'keep_alive', 'mode']);

/** What /api/embed ignores, worked out before validation so that an error answer carries the header too. */
export const embedIgnoredParams = (raw: unknown) => ignored(raw, EMBED_FIELDS);
/** What /api/embeddings ignores. */
export const embeddingsIgnoredParams = (raw: unknown) => ignored(raw, EMBEDDINGS_FIELDS);

/** The body without its null fields (null counts as not sent), validated, with Ollama's lower-case messages. */
function validate<T>(schema: z.ZodType<T>, raw: unknown): T {
  if (!isRecord(raw)) {
    throw new AppError('invalid_request', 'The request body must be a JSON object.');
  }
  const body = Object.fromEntries(Object.entries(raw).filter(([, v]) => v !== null));
  const parsed = schema.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const param = paramPath(issue.path);
    if (param === 'model' && body.model === undefined) {
      throw new AppError('model_required', 'model is required', 'model');
    }
    throw new AppError('invalid_request', param ? `invalid ${param}: ${issue.message}` : issue.message, param);
  }
  return parsed.data;
}

const modeOf = (m: z.infer<typeof mode>) => (m === 'opengpu' ? 'network' : (m ?? 'auto'));

/** The inputs of /api/embed, with the refusals Ollama's clients can act on named precisely. */
function inputOf(input: unknown): string[] {
  if (input === undefined || input === '') {
    return [];
  }
  if (typeof input === 'string') {
    return [input];
  }
  // Ollama's own message for anything but a string or strings.
  if (!Array.isArray(input) || input.some((text) => typeof text !== 'string')) {
    throw new AppError('invalid_request', 'invalid input type', 'input');
  }
  if (input.length > EMBED_MAX_INPUTS) {
    throw new AppError(
      'invalid_request',
      `too many inputs: at most ${EMBED_MAX_INPUTS} per request (this one has ${input.length})`,
      'input',
    );
  }
  const empty = input.indexOf('');
  if (empty >= 0) {
    throw new AppError(
      'invalid_request',
      `input[${empty}] is empty: every input of a list needs at least one character`,
      `input[${empty}]`,
    );
  }
  return input as string[];
}

/** Validates a /api/embed request. `truncate` defaults to true, as Ollama's does. */
export function parseOllamaEmbed(raw: unknown): OllamaEmbedRequest {
  const b = validate(embedSchema.omit({ input: true }), raw);
  // Checked by hand for messages that name the fault; to the rules the schema documents.
  const input = inputOf((raw as Record<string, unknown>).input ?? undefined);
  return {
    model: b.model,
    mode: modeOf(b.mode),
    input,
    truncate: b.truncate ?? true,
    ...(b.dimensions ? { dimensions: b.dimensions } : {}),
  };
}

/** Validates a /api/embeddings request. */
export function parseOllamaEmbeddings(raw: unknown): OllamaEmbeddingsRequest {
  const b = validate(embeddingsSchema, raw);
  return { model: b.model, mode: modeOf(b.mode), prompt: b.prompt ?? '' };
}
