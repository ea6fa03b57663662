import { HashCodec, hashField } from '../redis/hash-codec';
import type { HashField } from '../redis/hash-codec';

/** A connected device's live state, as its dispatcher (and the task transitions) keep it. */
export interface DeviceState {
  /** The dispatcher the device is connected to; null when no dispatcher holds the device. */
  dispatcher: string | null;
  connectedAt: Date | null;
  heartbeatAt: Date | null;
  /** `network`, or the organization that owns the device. */
  pool: string | null;
  /** Its runtime can take tasks. */
  available: boolean;
  /** The address of the task it serves. */
  task: string | null;
  /** The models it serves (announced and allowed). */
  models: string[];
  /** The digest it announced for each of those models, in their order ('' for none). */
  digests: string[];
  features: string[];
}

const f = hashField;

/**
 * A device's live state hash (`sy:dev:<id>`, see keys.deviceState), written by its dispatcher
 * (DeviceStateRepository) and by the task transitions (the task it holds), read by the admin views.
 */
export const deviceStateCodec = new HashCodec({
  dispatcher: f.optionalText('disp', 'the dispatcher it is connected to'),
  connectedAt: f.optionalTime('conn', 'when it connected'),
  heartbeatAt: f.optionalTime('hb', 'its last heartbeat (renewed with the state)'),
  pool: f.optionalText('pool', '`network` or its organization'),
  available: f.flag('avail', 'its runtime can take tasks'),
  task: f.optionalText('task', 'the address of the task it serves (empty: none)'),
  models: f.list('models', 'the models it serves'),
  digests: f.list('digests', 'the digest it announced for each of them, in their order (empty: none)'),
  features: f.list('features', 'the features it announced, sorted'),
} satisfies { [K in keyof DeviceState]: HashField<DeviceState[K]> });

/** The device state's field names, for scripts' templates. */
export const DEVICE_FIELDS = deviceStateCodec.names;
