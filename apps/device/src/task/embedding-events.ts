import type { Usage } from '@app/common/protocol/chat';
import type { EmbeddingVector } from '@app/common/protocol/embeddings';
import { EMBED_MAX_DIMENSIONS, encodeVector } from '@app/common/protocol/embeddings';

/**
 * How an embedding task's vectors go to the dispatcher: checked against what the protocol accepts,
 * encoded (float32, little-endian, base64), and cut into `task:embedding` events of a bounded size.
 */

/**
 * The most bytes of JSON one `task:embedding` event carries. The dispatcher closes the connection of
 * a device that sends an event over its DEVICE_MAX_EVENT_BYTES (256 KiB by default); this keeps a
 * quarter of that for socket.io's framing and for a dispatcher configured somewhat lower, and still
 * carries 47 vectors of 768 dimensions, or 11 of 3,072, to an event. The longest vector the protocol
 * carries (EMBED_MAX_DIMENSIONS, 87 KB in base64) fits in one; a vector is never cut.
 */
export const EMBEDDING_EVENT_BYTES = 192 * 1024;

/** The largest `seq` the protocol carries (messages.ts): an event's size is reckoned with it, whatever its own. */
const MAX_SEQ = 10_000_000;

/** `{"index":` and `,"embedding":"` and `"}`: an entry's JSON besides its index and its base64 (which needs no escaping). */
const ENTRY_FRAME_BYTES = 25;

/**
 * Why a backend's vectors cannot be sent as an answer to `inputs` inputs, or null when they can: one
 * per input, all of one length from 1 to EMBED_MAX_DIMENSIONS, every value finite. The upstream
 * backends check what their runtime answered with its own words; this is the last guard before the
 * wire, where an event the dispatcher refuses would cost the device its connection.
 */
export function vectorsProblem(vectors: readonly Float32Array[], inputs: number): string | null {
  if (vectors.length !== inputs) {
    return `the backend gave ${vectors.length} vectors for ${inputs} inputs`;
  }
  const length = vectors[0]?.length ?? 0;
  if (length < 1 || length > EMBED_MAX_DIMENSIONS) {
    return `the backend gave vectors of ${length} dimensions (the protocol carries 1 to ${EMBED_MAX_DIMENSIONS})`;
  }
  for (const [index, vector] of vectors.entries()) {
    if (vector.length !== length) {
      return `the backend gave vectors of ${length} and ${vector.length} dimensions`;
    }
    if (!vector.every(Number.isFinite)) {
      return `the backend gave a vector with a value that is not finite (input ${index})`;
    }
  }
  return null;
}

/**
 * The `data` of each `task:embedding` event for these vectors, in the inputs' order: as many vectors
 * as fit {@link EMBEDDING_EVENT_BYTES} of JSON with the task's address and any seq, and a vector too
 * large for it alone. Encoded one event at a time, so that a large task never holds all its base64 at once.
 */
export function* embeddingEvents(
  address: string,
  vectors: readonly Float32Array[],
  budget = EMBEDDING_EVENT_BYTES,
): Generator<EmbeddingVector[]> {
  const envelope = JSON.stringify({ task_address: address, seq: MAX_SEQ, data: [] }).length;
  let data: EmbeddingVector[] = [];
  let bytes = envelope;
  for (const [index, vector] of vectors.entries()) {
    const embedding = encodeVector(vector);
    const entry = ENTRY_FRAME_BYTES + String(index).length + embedding.length;
    // Entries after the first are preceded by a comma.
    if (data.length > 0 && bytes + 1 + entry > budget) {
      yield data;
      data = [];
      bytes = envelope;
    }
    bytes += (data.length > 0 ? 1 : 0) + entry;
    data.push({ index, embedding });
  }
  if (data.length > 0) {
    yield data;
  }
}

/** An embedding task's usage: its inputs' tokens as prompt, nothing as completion; null when the runtime gave no count. */
export function embeddingUsage(promptTokens: number | null): Usage | null {
  return promptTokens === null
    ? null
    : { prompt_tokens: promptTokens, completion_tokens: 0, total_tokens: promptTokens };
}
