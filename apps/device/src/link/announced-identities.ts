import type { Feature } from '@app/common/protocol/chat';
import type { AnnouncePayload, ModelIdentity } from '@app/common/protocol/messages';
import type { Backend } from '../backends/backend';
import { AGENT_VERSION } from '../version';

/**
 * The most bytes of identities an announce carries: the dispatcher closes the connection of a device
 * whose event is over DEVICE_MAX_EVENT_BYTES (256 KiB by default), and a runtime listing hundreds of
 * models with long weight paths could take an announce past it. The models themselves take at most
 * 200 KiB (1,000 ids of 200 characters); this keeps the rest of the default's room for identities
 * that say less than it would cost to lose the connection.
 */
export const IDENTITIES_BUDGET_BYTES = 48 * 1024;

/**
 * The identities an announce carries: in order, while they fit the budget (as JSON), those with a
 * digest first (what an admin's pin is checked against); `dropped` counts those left out, which the
 * dispatcher then reads as saying nothing of their models.
 */
export function announcedIdentities(
  identities: readonly ModelIdentity[],
  budget = IDENTITIES_BUDGET_BYTES,
): { identities: ModelIdentity[]; dropped: number } {
  const ordered = [...identities.filter((i) => i.digest !== null), ...identities.filter((i) => i.digest === null)];
  const kept: ModelIdentity[] = [];
  let bytes = 2;
  for (const identity of ordered) {
    const size = Buffer.byteLength(JSON.stringify(identity)) + 1;
    if (bytes + size > budget) {
      continue;
    }
    bytes += size;
    kept.push(identity);
  }
  return { identities: kept, dropped: identities.length - kept.length };
}

/**
 * The features the agent announces: its backend's, and `embed_prefetch` with `embeddings`. Taking a
 * second embedding task while one runs is the agent's doing (the runtime only sees two requests at
 * once, which every runtime that embeds queues or batches), so no backend declares it.
 */
export function announcedFeatures(features: readonly Feature[]): Feature[] {
  return features.includes('embeddings') && !features.includes('embed_prefetch')
    ? [...features, 'embed_prefetch']
    : [...features];
}

/**
 * What an announce says of the device now: its backend's models, features (as {@link announcedFeatures}
 * gives them) and identities (within the budget; `dropped` counts those left out), whether it takes
 * tasks and the task it still runs. The agent's announces and doctor's dry run are the same payload.
 */
export function announcePayload(
  backend: Pick<Backend, 'name' | 'models' | 'features' | 'identities'>,
  state: { available: boolean; runningTask: string | null },
): { payload: AnnouncePayload; dropped: number } {
  const { identities, dropped } = announcedIdentities(backend.identities());
  return {
    payload: {
      agent_version: AGENT_VERSION,
      backend: backend.name,
      models: backend.models(),
      features: announcedFeatures(backend.features),
      available: state.available,
      running_task: state.runningTask,
      identities,
    },
    dropped,
  };
}
