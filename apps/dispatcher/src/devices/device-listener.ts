import type { DeltaPayload, DonePayload, EmbeddingPayload, TaskErrorPayload } from '@app/common';
import type { DeviceSession } from './device-session';

/**
 * What the devices module reports to whoever hands out work (the dispatch module registers itself):
 * devices that become ready or change, devices that leave, and the validated events of their tasks.
 * The arrow runs one way: devices knows nothing of tasks.
 */
export interface DeviceListener {
  /** The device announced (first or again): its models, features or availability may have changed. */
  onAnnounced(session: DeviceSession): void;
  /** The connection is gone (or replaced by a newer one of the same device). */
  onGone(session: DeviceSession): void;
  onDelta(session: DeviceSession, payload: DeltaPayload): void;
  onEmbedding(session: DeviceSession, payload: EmbeddingPayload): void;
  onDone(session: DeviceSession, payload: DonePayload): void;
  onError(session: DeviceSession, payload: TaskErrorPayload): void;
  /** A malformed event that names a task: the listener decides whether it is the device's own. */
  onInvalidEvent(session: DeviceSession, taskAddress: string, reason: string): void;
}
