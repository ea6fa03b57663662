import type { EmbedParams } from '@app/common/protocol/embeddings';
import type { EmbedResult } from './backend';
import type { UpstreamErrorBody } from './upstream/runtime-errors';
import { badAnswer, httpError } from './upstream/runtime-errors';
import { tokenCount } from './upstream/runtime-fields';
import { runtimeVectors } from './upstream/runtime-vectors';

/**
 * How the server is asked to write the vectors: `base64`, each vector's float32 bytes (little-endian)
 * in base64, or `float`, JSON numbers. base64 is asked first: for a batch of 64 vectors of 768
 * dimensions the float body is about 1 MB, which took the agent about 15 ms to read (5 ms to decode
 * the text, 10 ms to parse it) while the runtime waited for its next batch, and the runtime itself
 * spends time printing the decimals; in base64 it is 265 KB, read in about 4 ms. vLLM, llama.cpp's
 * server (since December 2024) and OpenAI have it; a server that refuses it is asked for `float` from
 * then on ({@link refusesBase64}), and one that ignores it answers floats, which are read as well.
 */
export type OpenAIEmbedFormat = 'base64' | 'float';

/**
 * The /embeddings request for a task: the inputs as they are (texts, or token ids, which vLLM and
 * llama.cpp's server take), `encoding_format` as {@link OpenAIEmbedFormat} says, and `dimensions`
 * when the task has it (only an operator's `--features` declares `embed_dimensions` here). `truncate`
 * is Ollama's: these servers refuse an input longer than the model's context whatever it says, as
 * Ollama does with `truncate: false`.
 */
export function openaiEmbedRequest(
  model: string,
  params: EmbedParams,
  format: OpenAIEmbedFormat,
): Record<string, unknown> {
  const body: Record<string, unknown> = { model, input: params.input, encoding_format: format };
  if (params.dimensions !== undefined) {
    body.dimensions = params.dimensions;
  }
  return body;
}

/** The statuses a server refuses a field's value with: 400 (vLLM, llama.cpp, OpenAI), 422 (FastAPI's own validation). */
const REFUSAL_STATUSES = new Set([400, 422]);
/**
 * A refusal that names the field or the value: vLLM's validation error (its `loc` says
 * `encoding_format`), FastAPI's `detail` (the same `loc`), llama.cpp's "Can be either float or base64".
 */
const NAMES_THE_FORMAT = /encoding[_ ]format|base64/i;

/**
 * Whether an error answer to a `base64` request is the server refusing base64: a 400 or 422 whose
 * message names `encoding_format` or `base64`, and that is not what the agent reads as another error
 * (a prompt over the context, which says nothing of the format however its input is echoed). Not
 * proof: a validation error that echoes the whole request names both for another reason, which is why
 * the backend remembers float only once a float request was taken.
 */
export function refusesBase64(status: number, body: UpstreamErrorBody): boolean {
  return (
    REFUSAL_STATUSES.has(status) &&
    httpError(status, body).code === 'upstream_bad_request' &&
    NAMES_THE_FORMAT.test(body.message)
  );
}

/**
 * The server's answer, `{object: "list", data: [{index, embedding}], model, usage: {prompt_tokens}}`:
 * the vectors put in the inputs' order by their `index`, each index from 0 to n - 1 exactly once (a
 * server that lost or repeated one would otherwise give some input another input's vector).
 */
export function openaiEmbedResult(answer: unknown, params: EmbedParams): EmbedResult {
  const body = answer as { data?: unknown; usage?: { prompt_tokens?: unknown } | null } | null;
  if (!body || typeof body !== 'object' || !Array.isArray(body.data)) {
    throw badAnswer('/embeddings answered without a data array');
  }
  const inputs = params.input.length;
  const entries = body.data as ({ index?: unknown; embedding?: unknown } | null)[];
  if (entries.length !== inputs) {
    throw badAnswer(`${entries.length} vectors for ${inputs} inputs`);
  }
  const ordered = new Array<unknown>(inputs);
  const seen = new Set<number>();
  for (const entry of entries) {
    const index = entry?.index;
    if (typeof index !== 'number' || !Number.isInteger(index) || index < 0 || index >= inputs) {
      throw badAnswer(`a vector has the index ${JSON.stringify(index)}, not one of 0 to ${inputs - 1}`);
    }
    if (seen.has(index)) {
      throw badAnswer(`two vectors have the index ${index}`);
    }
    seen.add(index);
    ordered[index] = entry?.embedding;
  }
  return { vectors: runtimeVectors(ordered, params), promptTokens: tokenCount(body.usage?.prompt_tokens) };
}
