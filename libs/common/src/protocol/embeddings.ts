import { z } from 'zod';
import type { Feature, Requirement } from './chat';

/**
 * An embedding request as Switchyard carries it from the api to a device (one batch of a client's
 * inputs), and the vectors a device sends back. Part of the device protocol (docs/protocol.md,
 * "Embeddings"); the types are inferred from these schemas.
 */

/** The most inputs one request may carry (OpenAI's limit), and so the most one task may. */
export const EMBED_MAX_INPUTS = 2048;
/**
 * The most dimensions a vector may have. The largest embedding models give 4,096 (OpenAI's largest
 * 3,072); four times that leaves room, and bounds what a device can make the relay hold: a batch of
 * 64 such vectors is 4 MiB, a request of 2,048 inputs 128 MiB (one vector, 87 KB in base64, always
 * fits in one event).
 */
export const EMBED_MAX_DIMENSIONS = 16_384;
/** The largest token id an input given as tokens may hold (a Postgres integer, as every count). */
const MAX_TOKEN_ID = 2_147_483_647;

/** Inputs as text (each at least one character, as OpenAI requires) or as token ids. */
export const embedInputSchema = z.union([
  z.array(z.string().min(1)).min(1).max(EMBED_MAX_INPUTS),
  z
    .array(z.array(z.number().int().min(0).max(MAX_TOKEN_ID)).min(1))
    .min(1)
    .max(EMBED_MAX_INPUTS),
]);
export type EmbedInput = z.infer<typeof embedInputSchema>;

export const embedParamsSchema = z.object({
  input: embedInputSchema,
  /** The vectors' length, for a model that can shorten them (feature `embed_dimensions`). */
  dimensions: z.number().int().min(1).max(EMBED_MAX_DIMENSIONS).optional(),
  /**
   * Ollama's `truncate`: false asks the runtime to refuse an input longer than the model's context
   * instead of cutting it (the runtime's default is to cut). Passed on where the runtime has it.
   */
  truncate: z.boolean().optional(),
});
export type EmbedParams = z.infer<typeof embedParamsSchema>;

/**
 * The inputs in order, in as few batches of at most `size` as hold them, of sizes that differ by one
 * at most: 1,000 inputs by 64 are 16 batches of 62 or 63, not 15 of 64 and one of 40. Batches run in
 * parallel on the devices serving a model, so the request ends with its slowest device: even batches give
 * every device the same share.
 */
export function batchesOf(input: EmbedInput, size: number): EmbedInput[] {
  const count = Math.ceil(input.length / size);
  const batches: EmbedInput[] = [];
  for (let b = 0, start = 0; b < count; b++) {
    const end = start + Math.floor(input.length / count) + (b < input.length % count ? 1 : 0);
    batches.push(input.slice(start, end));
    start = end;
  }
  return batches;
}

/** Whether inputs are token ids rather than text. */
export function isTokenInput(input: EmbedInput): input is number[][] {
  return typeof input[0] !== 'string';
}

/** What an embedding request needs from the device that serves it, each with the field at its origin. */
export function embedRequirements(params: EmbedParams): Requirement[] {
  const needs: Requirement[] = [{ feature: 'embeddings', param: 'model' }];
  if (isTokenInput(params.input)) {
    needs.push({ feature: 'embed_tokens', param: 'input' });
  }
  if (params.dimensions !== undefined) {
    needs.push({ feature: 'embed_dimensions', param: 'dimensions' });
  }
  return needs;
}

/** The features an embedding request needs. */
export function embedFeatures(params: EmbedParams): Feature[] {
  return embedRequirements(params).map((r) => r.feature);
}

/**
 * One vector: the input's index in the task, and its float32 values, little-endian, in base64 (as
 * OpenAI's `base64`). The dispatcher decodes it and writes it again itself (see vectorBytes), so what
 * reaches a client is always standard base64, whatever characters a device sent.
 */
export const embeddingVectorSchema = z.object({
  index: z
    .number()
    .int()
    .min(0)
    .max(EMBED_MAX_INPUTS - 1),
  embedding: z
    .string()
    .min(8)
    .max(4 * Math.ceil((EMBED_MAX_DIMENSIONS * 4) / 3)),
});
export type EmbeddingVector = z.infer<typeof embeddingVectorSchema>;

/** A float32 vector in base64 (little-endian), as devices send it and OpenAI's `base64` format gives it. */
export function encodeVector(values: ArrayLike<number>): string {
  const floats = Float32Array.from(values);
  return Buffer.from(floats.buffer, floats.byteOffset, floats.byteLength).toString('base64');
}

/**
 * The little-endian float32 bytes of a vector in base64; null when they are not whole float32s, or a
 * value is not finite (its exponent bits all set: an infinity or a NaN). Reads the bytes once, without
 * building a number per value: the dispatcher checks every vector a device sends with it.
 */
export function vectorBytes(base64: string): Buffer | null {
  const bytes = Buffer.from(base64, 'base64');
  if (bytes.byteLength === 0 || bytes.byteLength % 4 !== 0) {
    return null;
  }
  // Byte 3 of each value holds the sign and the exponent's top 7 bits, byte 2's top bit its last.
  for (let i = 3; i < bytes.byteLength; i += 4) {
    if ((bytes[i] & 0x7f) === 0x7f && (bytes[i - 1] & 0x80) !== 0) {
      return null;
    }
  }
  return bytes;
}

/** Whether this machine stores a Float32Array's values little-endian, as the wire has them. */
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** The float32 values of a vector in base64; null when its bytes are not whole float32s or not all finite. */
export function decodeVector(base64: string): Float32Array | null {
  const bytes = vectorBytes(base64);
  if (!bytes) {
    return null;
  }
  // Copied: a Buffer from the pool may start at an offset that is not a multiple of 4.
  const floats = new Float32Array(bytes.byteLength / 4);
  if (LITTLE_ENDIAN) {
    new Uint8Array(floats.buffer).set(bytes);
  } else {
    for (let i = 0; i < floats.length; i++) {
      floats[i] = bytes.readFloatLE(i * 4);
    }
  }
  return floats;
}
