import type { EmbedParams } from '@app/common/protocol/embeddings';
import type { EmbedResult } from './backend';
import { badAnswer } from './upstream/runtime-errors';
import { tokenCount } from './upstream/runtime-fields';
import { runtimeVectors } from './upstream/runtime-vectors';

/**
 * The /embeddings request for a task: the inputs as they are (texts, or token ids, which vLLM and
 * llama.cpp's server take), with `encoding_format: "float"`, which every server has (some have no
 * `base64`), and `dimensions` when the task has it (only an operator's `--features` declares
 * `embed_dimensions` here). `truncate` is Ollama's: these servers refuse an input longer than the
 * model's context whatever it says, as Ollama does with `truncate: false`.
 */
export function openaiEmbedRequest(model: string, params: EmbedParams): Record<string, unknown> {
  const body: Record<string, unknown> = { model, input: params.input, encoding_format: 'float' };
  if (params.dimensions !== undefined) {
    body.dimensions = params.dimensions;
  }
  return body;
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
