import { requiredFeatures } from '@app/common/protocol/chat';
import { embedFeatures } from '@app/common/protocol/embeddings';
import type { AssignPayload } from '@app/common/protocol/device-protocol';
import type { Backend } from '../backends/backend';

export interface Refusal {
  reason: string;
  detail?: Record<string, unknown>;
}

/**
 * Why this device cannot take a valid assignment now (the link refuses a malformed one with
 * `invalid_assignment` before it gets here), or null when it can: shutting down, busy, a runtime that
 * does not answer, a model or a feature it does not serve.
 */
export function refusalOf(
  payload: AssignPayload,
  state: { running: boolean; currentTask: string | null; backend: Backend },
): Refusal | null {
  const { backend } = state;
  if (!state.running) {
    return { reason: 'shutting_down' };
  }
  if (state.currentTask) {
    return { reason: 'busy', detail: { running_task: state.currentTask } };
  }
  if (!backend.available()) {
    // An assignment that crossed the announce saying so; another device can take it.
    return { reason: 'upstream_unavailable' };
  }
  if (!backend.models().includes(payload.model)) {
    return { reason: 'model_not_served', detail: { model: payload.model } };
  }
  // An embedding task needs `embeddings` (and `embed_tokens`, `embed_dimensions` as it asks), which the
  // dispatcher checked before sending it; a device whose runtime lost them since (an older Ollama) says so.
  const needed = payload.kind === 'embed' ? embedFeatures(payload.embed) : requiredFeatures(payload.params, false);
  const missing = needed.filter((f) => !backend.features.includes(f));
  if (missing.length > 0) {
    // Answering without the feature would be a wrong answer that looks right; the dispatcher can try elsewhere.
    return { reason: 'unsupported_feature', detail: { features: missing } };
  }
  return null;
}
