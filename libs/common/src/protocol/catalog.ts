import type { InboundMessages, MessageCatalog, OutboundMessages, SocketEvents } from './message-catalog';
import { inboundOf, outboundOf } from './message-catalog';
import {
  announceAckSchema,
  announceSchema,
  assignAckSchema,
  assignSchema,
  cancelSchema,
  deltaSchema,
  doneSchema,
  embeddingSchema,
  taskErrorSchema,
} from './messages';

/**
 * The device protocol's catalog, one per direction: every event by its name on the wire, with the
 * schema of its message and of its acknowledgement. Everything else is derived from these two objects:
 * socket.io's event maps, the event names, the handler tables of the dispatcher and the agent (a missing
 * handler does not compile), and the validation of everything either side receives.
 */

/**
 * The version of the catalog below. Bump it on any change a receiver of the previous version could not
 * read, and write that version's dialect (see versions.ts): dispatchers serve the previous version too.
 *
 * Version 2: the announce is answered with the models accepted and refused; task errors carry a code
 * from DEVICE_ERROR_CODES.
 * Version 3: the announce says what the runtime says each model is (`identities`); a model may be
 * refused `digest_mismatch` or `digest_unknown`.
 * Added within version 3 (a receiver of the version before never meets them): embedding tasks
 * (`task:assign` with `kind: "embed"`, sent only to a device that declares the `embeddings` feature,
 * which answers with `task:embedding`), and `task:done` without finish reasons for them.
 */
export const PROTOCOL_VERSION = 3;

/** What the dispatcher sends a device. */
export const SERVER_TO_DEVICE = {
  'task:assign': { message: assignSchema, ack: assignAckSchema },
  'task:cancel': { message: cancelSchema },
} as const satisfies MessageCatalog;

/** What a device sends the dispatcher. */
export const DEVICE_TO_SERVER = {
  announce: { message: announceSchema, ack: announceAckSchema },
  'task:delta': { message: deltaSchema },
  'task:embedding': { message: embeddingSchema },
  'task:done': { message: doneSchema },
  'task:error': { message: taskErrorSchema },
} as const satisfies MessageCatalog;

export type ServerToDeviceCatalog = typeof SERVER_TO_DEVICE;
export type DeviceToServerCatalog = typeof DEVICE_TO_SERVER;
/** An event the dispatcher sends. */
export type ServerToDeviceEvent = keyof ServerToDeviceCatalog;
/** An event a device sends. */
export type DeviceToServerEvent = keyof DeviceToServerCatalog;
/** socket.io's event map of what the dispatcher sends (the agent's listen map, the dispatcher's emit map). */
export type ServerToDeviceEvents = SocketEvents<ServerToDeviceCatalog>;
/** socket.io's event map of what a device sends (the dispatcher's listen map, the agent's emit map). */
export type DeviceToServerEvents = SocketEvents<DeviceToServerCatalog>;

/** An event's short name: the `task:` prefix groups a task's events on the wire and is left out. */
type ShortName<E extends string> = E extends `task:${infer S}` ? S : E;
/** The events of both directions by short name: `{ assign: 'task:assign', announce: 'announce', … }`. */
export type DeviceEventNames = {
  readonly [E in ServerToDeviceEvent | DeviceToServerEvent as ShortName<E>]: E;
};

/** Event names, both directions, derived from the catalog: `DEVICE_EVENTS.assign` is `'task:assign'`. */
export const DEVICE_EVENTS = Object.fromEntries(
  [...Object.keys(SERVER_TO_DEVICE), ...Object.keys(DEVICE_TO_SERVER)].map((e) => [e.replace(/^task:/, ''), e]),
) as DeviceEventNames;

/**
 * How the dispatcher speaks one protocol version: what a device of that version sends, read into the
 * current shapes, and what the dispatcher sends, written in that version's (see versions.ts).
 */
export interface ProtocolDialect {
  readonly version: number;
  readonly fromDevice: InboundMessages<DeviceToServerCatalog>;
  readonly toDevice: OutboundMessages<ServerToDeviceCatalog>;
}

/** The current version's dialect: the catalog as it is. */
export const CURRENT_DIALECT: ProtocolDialect = {
  version: PROTOCOL_VERSION,
  fromDevice: inboundOf(DEVICE_TO_SERVER),
  toDevice: outboundOf(SERVER_TO_DEVICE),
};
