import type { EmbedParams } from '@app/common/protocol/embeddings';
import { isTokenInput } from '@app/common/protocol/embeddings';
import type { EmbedResult } from './backend';
import { BackendError } from './backend';
import { badAnswer } from './upstream/runtime-errors';
import { tokenCount } from './upstream/runtime-fields';
import { runtimeVectors } from './upstream/runtime-vectors';

/**
 * The /api/embed request for a task: the inputs as a list of texts, and `truncate` and `dimensions`
 * when the task has them. `dimensions` reaches Ollama only on a device that declares
 * `embed_dimensions` (0.11.11 and newer: older versions drop the field), since the agent refuses the
 * task otherwise. Ollama takes no token ids, and this backend does not declare `embed_tokens`; an
 * operator's `--features` that does gets `invalid_request` rather than Ollama's "invalid input type".
 */
export function ollamaEmbedRequest(model: string, params: EmbedParams): Record<string, unknown> {
  if (isTokenInput(params.input)) {
    throw new BackendError('invalid_request', "Ollama's /api/embed takes inputs as text, not as token ids");
  }
  const body: Record<string, unknown> = { model, input: params.input };
  if (params.truncate !== undefined) {
    body.truncate = params.truncate;
  }
  if (params.dimensions !== undefined) {
    body.dimensions = params.dimensions;
  }
  return body;
}

/**
 * Ollama's answer, `{model, embeddings, total_duration, load_duration, prompt_eval_count}`: the vectors
 * in the inputs' order (already normalised by Ollama), and the tokens of all the inputs, which Ollama
 * gives since 0.3.3 and leaves out when it is 0.
 */
export function ollamaEmbedResult(answer: unknown, params: EmbedParams): EmbedResult {
  const body = answer as { embeddings?: unknown; prompt_eval_count?: unknown } | null;
  if (!body || typeof body !== 'object' || !Array.isArray(body.embeddings)) {
    throw badAnswer('/api/embed answered without an embeddings array');
  }
  return {
    vectors: runtimeVectors(body.embeddings as unknown[], params),
    promptTokens: tokenCount(body.prompt_eval_count),
  };
}
