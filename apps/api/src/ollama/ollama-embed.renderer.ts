import type { EmbedResult } from '../embeddings/embed-request';
import { JsonBytes, eachVector } from '../embeddings/float-json';

const nanos = (ms: number) => Math.round(ms * 1e6);

/**
 * Ollama's /api/embed answer, as bytes: `{"model","embeddings":[[…],…],"total_duration",
 * "load_duration","prompt_eval_count"}` plus `mode` and `task_addresses`, as /api/chat carries `mode`
 * and `task_address`. `total_duration` is the api's measure from the request's arrival (ns);
 * `load_duration` is 0, since Switchyard cannot see a runtime load its model; `prompt_eval_count` is
 * left out when a device gave no count, as Ollama leaves out what it did not count.
 */
export async function renderOllamaEmbed(
  model: string,
  result: EmbedResult,
  totalMs: number,
  /** The vectors already written, batch by batch (see BatchParts); else they are written here. */
  parts?: Buffer[],
): Promise<Buffer> {
  const items = parts ?? [await ollamaVectors(result.vectors, 0)];
  const count = result.promptTokens === null ? '' : `,"prompt_eval_count":${result.promptTokens}`;
  return Buffer.concat([
    Buffer.from(`{"model":${JSON.stringify(model)},"embeddings":[`),
    ...items,
    Buffer.from(
      `],"total_duration":${nanos(totalMs)},"load_duration":0${count},"mode":${JSON.stringify(result.mode)},"task_addresses":${JSON.stringify(result.taskAddresses)}}`,
    ),
  ]);
}

/** The `embeddings` arrays of vectors whose first is input `first`, each with the comma before it but for the first. */
export async function ollamaVectors(vectors: string[], first: number): Promise<Buffer> {
  const out = new JsonBytes();
  await eachVector(vectors, (values, i) => {
    if (first + i > 0) {
      out.text(',');
    }
    out.floats(values);
  });
  return out.bytes();
}

/** /api/embed with nothing to embed: what Ollama answers once it has loaded the model. */
export function emptyOllamaEmbed(model: string, totalMs: number) {
  return { model, embeddings: [], total_duration: nanos(totalMs), load_duration: 0 };
}

/** The older /api/embeddings answer: the one input's vector. */
export async function renderOllamaEmbedding(result: EmbedResult): Promise<Buffer> {
  if (result.vectors.length !== 1) {
    throw new Error(`one input embedded as ${result.vectors.length} vectors`);
  }
  const out = new JsonBytes();
  out.text('{"embedding":');
  await eachVector(result.vectors, (values) => out.floats(values));
  out.text('}');
  return out.bytes();
}
