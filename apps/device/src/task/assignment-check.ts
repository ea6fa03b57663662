import { requiredFeatures } from '@app/common/protocol/chat';
import { embedFeatures } from '@app/common/protocol/embeddings';
import type { AssignPayload } from '@app/common/protocol/device-protocol';
import type { Backend } from '../backends/backend';
import { announcedFeatures } from '../link/announced-identities';
import type { TaskKind } from './running-task';

export interface Refusal {
  reason: string;
  detail?: Record<string, unknown>;
}

/** A task the agent holds, as far as taking another one goes. */
export interface HeldTask {
  address: string;
  kind: TaskKind;
}

/**
 * Whether a device holding these tasks (oldest first) has room for this one: none held, or, with
 * `embed_prefetch` announced, a second embedding task beside one. Never a third, never a chat task
 * beside another, never an embedding task beside a chat task.
 */
function hasRoom(payload: AssignPayload, held: readonly HeldTask[], backend: Backend): boolean {
  if (held.length === 0) {
    return true;
  }
  return (
    held.length === 1 &&
    held[0].kind === 'embed' &&
    payload.kind === 'embed' &&
    announcedFeatures(backend.features).includes('embed_prefetch')
  );
}

/**
 * Why this device cannot take a valid assignment now (the link refuses a malformed one with
 * `invalid_assignment` before it gets here), or null when it can: shutting down, busy, a runtime that
 * does not answer, a model or a feature it does not serve.
 */
export function refusalOf(
  payload: AssignPayload,
  state: { running: boolean; held: readonly HeldTask[]; backend: Backend },
): Refusal | null {
  const { backend, held } = state;
  if (!state.running) {
    return { reason: 'shutting_down' };
  }
  if (!hasRoom(payload, held, backend)) {
    return { reason: 'busy', detail: { running_tasks: held.map((t) => t.address) } };
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
