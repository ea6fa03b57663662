import type { EmbedParams } from '@app/common/protocol/embeddings';
import { EMBED_MAX_DIMENSIONS } from '@app/common/protocol/embeddings';
import { BackendError } from '../backend';
import { badAnswer } from './runtime-errors';

/**
 * A runtime's vectors, read into what the protocol carries: float32 values, one vector per input, all
 * of one length. What the agent cannot send as it is (a value that is not a finite float32, a vector
 * too long for the protocol) or that is not what was asked (a count other than the inputs', a length
 * other than the requested `dimensions`) is an error rather than something passed off as an answer.
 */

/** Standard base64 with its padding, as OpenAI, vLLM (Python's base64) and llama.cpp's server write it. */
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/**
 * A vector in OpenAI's `base64` format: its float32 values' bytes, little-endian. Checked before it is
 * decoded because Buffer skips characters outside the alphabet instead of refusing them, which would
 * shift every value after one; then the bytes must be whole float32s, each finite, as a JSON vector's
 * values must be.
 */
function base64Vector(raw: string, index: number): Float32Array {
  if (!BASE64.test(raw)) {
    throw badAnswer(`vector ${index} is not base64`);
  }
  const bytes = Buffer.from(raw, 'base64');
  if (bytes.byteLength % 4 !== 0) {
    throw badAnswer(`vector ${index} is ${bytes.byteLength} bytes, not whole float32 values`);
  }
  const vector = new Float32Array(bytes.byteLength / 4);
  for (let i = 0; i < vector.length; i++) {
    // readFloatLE: the bytes are little-endian whatever this host is, and a pooled Buffer may start at
    // an offset that a Float32Array view could not take.
    vector[i] = bytes.readFloatLE(i * 4);
    if (!Number.isFinite(vector[i])) {
      throw badAnswer(`vector ${index} has a value that is not finite (at ${i})`);
    }
  }
  return vector;
}

/**
 * One vector: a base64 string of float32s (OpenAI's `base64` format, which the agent asks for), or JSON
 * numbers (a server that has no `base64`, or ignores it), each rounded to float32: the runtimes compute
 * in float32 and write each value as a decimal that reads back to it, so the rounding gives their
 * values bit for bit.
 */
function vectorOf(raw: unknown, index: number): Float32Array {
  if (typeof raw === 'string') {
    return base64Vector(raw, index);
  }
  if (!Array.isArray(raw)) {
    throw badAnswer(`vector ${index} is neither base64 nor an array of numbers`);
  }
  const vector = new Float32Array(raw.length);
  for (let i = 0; i < raw.length; i++) {
    const value: unknown = raw[i];
    if (typeof value !== 'number') {
      throw badAnswer(`vector ${index} has a value that is not a number (at ${i})`);
    }
    // Stored as Math.fround rounds; a number beyond float32's range becomes an infinity, which the
    // protocol refuses.
    vector[i] = value;
    if (!Number.isFinite(vector[i])) {
      throw badAnswer(`vector ${index} has a value beyond float32's range (at ${i})`);
    }
  }
  return vector;
}

/** The vectors a runtime answered for a task's inputs, checked against what the task asked. */
export function runtimeVectors(raw: readonly unknown[], params: EmbedParams): Float32Array[] {
  const inputs = params.input.length;
  if (raw.length !== inputs) {
    throw badAnswer(`${raw.length} vectors for ${inputs} inputs`);
  }
  const vectors = raw.map((v, i) => vectorOf(v, i));
  const length = vectors[0]?.length ?? 0;
  if (length === 0 || length > EMBED_MAX_DIMENSIONS) {
    throw badAnswer(`vectors of ${length} dimensions (the protocol carries 1 to ${EMBED_MAX_DIMENSIONS})`);
  }
  const other = vectors.findIndex((v) => v.length !== length);
  if (other >= 0) {
    throw badAnswer(`vector ${other} has ${vectors[other].length} dimensions, vector 0 has ${length}`);
  }
  const asked = params.dimensions;
  if (asked !== undefined && length < asked) {
    // Ollama gives the model's whole vector when asked for more; OpenAI refuses such a request.
    throw new BackendError(
      'upstream_bad_request',
      `the model's vectors have ${length} dimensions, fewer than the ${asked} requested`,
    );
  }
  if (asked !== undefined && length > asked) {
    // A runtime that ignored `dimensions`: the vectors would look right and be what was not asked for.
    throw badAnswer(`vectors of ${length} dimensions where ${asked} were requested (the runtime ignored dimensions)`);
  }
  return vectors;
}
