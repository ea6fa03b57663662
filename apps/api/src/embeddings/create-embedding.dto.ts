import { AppError, EMBED_MAX_INPUTS } from '@app/common';
import type { EmbedInput } from '@app/common';
import { paramPath } from '../common/validation';
import { createEmbeddingSchema, tokenIdSchema } from './embedding.schema';
import type { EmbedRequest } from './embed-request';

/** What the client asked of POST /v1/embeddings, validated: the request as the service takes it, and how to answer. */
export interface CreateEmbeddingRequest extends Pick<EmbedRequest, 'model' | 'mode' | 'input' | 'dimensions'> {
  /** The model as the client named it (or DEFAULT_MODEL), echoed in the answer. */
  model: string;
  /** `float`: arrays of numbers; `base64`: each vector's float32 bytes (little-endian), as OpenAI's SDKs ask by default. */
  encodingFormat: 'float' | 'base64';
}

/** Fields Switchyard acts on; any other top-level field is accepted, ignored and reported. */
const KNOWN = new Set(['model', 'input', 'encoding_format', 'dimensions', 'mode']);

const isRecord = (v: unknown): v is Record<string, unknown> => Boolean(v) && typeof v === 'object' && !Array.isArray(v);

/**
 * The sent (non-null) top-level fields that have no effect: `user` (OpenAI's abuse tracking, nothing a
 * device can use) and the unknown ones. Worked out before validation, so that a 400 carries the
 * x-switchyard-ignored-params header too.
 */
export function embeddingIgnoredParams(raw: unknown): string[] {
  if (!isRecord(raw)) {
    return [];
  }
  return Object.keys(raw).filter((k) => raw[k] !== null && !KNOWN.has(k));
}

const MAX_TOKEN_ID = tokenIdSchema.maxValue ?? Number.MAX_SAFE_INTEGER;

const invalid = (param: string, message: string) => new AppError('invalid_request', message, param);

/** OpenAI's own words for an empty input (`""`, `[]`, `[""]`, `[[]]`), so that clients matching on them still do. */
const emptyInput = (param: string) =>
  invalid(
    param,
    "'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference.",
  );

const INPUT_TYPES = 'a string, an array of strings, an array of token ids, or an array of arrays of token ids';

/** Token ids of one input, checked in a plain loop: zod takes a few hundred ms over the two million a 4 MiB body holds. */
function checkTokens(tokens: unknown[], param: string): number[] {
  if (tokens.length === 0) {
    throw emptyInput(param);
  }
  for (let j = 0; j < tokens.length; j++) {
    const t = tokens[j];
    if (typeof t !== 'number' || !Number.isInteger(t) || t < 0 || t > MAX_TOKEN_ID) {
      throw invalid(`${param}[${j}]`, `Invalid '${param}[${j}]': a token id is an integer from 0 to ${MAX_TOKEN_ID}.`);
    }
  }
  return tokens as number[];
}

/**
 * `input` in the one shape the service takes: a list of texts, or a list of token-id lists. A string
 * is one input, and so is a flat array of token ids (OpenAI's reading of `[1, 2, 3]`).
 */
function normaliseInput(input: unknown): EmbedInput {
  if (input === undefined) {
    throw invalid('input', "Missing required parameter: 'input'.");
  }
  if (typeof input === 'string') {
    if (input === '') {
      throw emptyInput('input');
    }
    return [input];
  }
  if (!Array.isArray(input)) {
    throw invalid('input', `Invalid 'input': expected ${INPUT_TYPES}.`);
  }
  if (input.length === 0) {
    throw emptyInput('input');
  }
  const first: unknown = input[0];
  if (typeof first === 'number') {
    return [checkTokens(input, 'input')];
  }
  if (input.length > EMBED_MAX_INPUTS) {
    throw invalid('input', `Too many inputs: at most ${EMBED_MAX_INPUTS} per request (this one has ${input.length}).`);
  }
  if (typeof first === 'string') {
    input.forEach((text: unknown, i) => {
      if (typeof text !== 'string') {
        throw invalid(`input[${i}]`, `Invalid 'input[${i}]': every input of a list of texts is a string.`);
      }
      if (text === '') {
        throw emptyInput(`input[${i}]`);
      }
    });
    return input as string[];
  }
  if (Array.isArray(first)) {
    return input.map((tokens: unknown, i) => {
      if (!Array.isArray(tokens)) {
        throw invalid(`input[${i}]`, `Invalid 'input[${i}]': every input of a list of token inputs is an array.`);
      }
      return checkTokens(tokens, `input[${i}]`);
    });
  }
  throw invalid('input[0]', `Invalid 'input': expected ${INPUT_TYPES}.`);
}

/**
 * Validates an OpenAI embeddings request. Every refusal is a 400 naming the param; nothing is queued
 * before this passes. The caps that need the configuration (MAX_INPUT_CHARS) are the service's, for
 * both APIs alike.
 */
export function parseCreateEmbedding(raw: unknown, defaultModel: string | undefined): CreateEmbeddingRequest {
  if (!isRecord(raw)) {
    throw new AppError('invalid_request', 'The request body must be a JSON object.');
  }
  // `null` counts as not sent, as on the chat route.
  const body = Object.fromEntries(Object.entries(raw).filter(([, v]) => v !== null));
  const { input, ...rest } = body;
  const parsed = createEmbeddingSchema.omit({ input: true }).safeParse(rest);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const param = paramPath(issue.path);
    throw new AppError('invalid_request', param ? `Invalid '${param}': ${issue.message}` : issue.message, param);
  }
  const b = parsed.data;
  const normalised = normaliseInput(input);
  const model = b.model ?? defaultModel;
  if (!model) {
    throw new AppError('model_required', "You must provide a model parameter ('model').", 'model');
  }
  return {
    model,
    mode: b.mode === 'opengpu' ? 'network' : (b.mode ?? 'auto'),
    input: normalised,
    ...(b.dimensions !== undefined ? { dimensions: b.dimensions } : {}),
    encodingFormat: b.encoding_format ?? 'float',
  };
}
