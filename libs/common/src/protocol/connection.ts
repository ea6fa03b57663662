import { z } from 'zod';

/** The socket.io namespace of devices; nothing is served on any other. */
export const DEVICE_NAMESPACE = '/devices';

/**
 * Handshake refusals (the `message` of socket.io's connect_error, or its start). `token` and
 * `protocol` are final for the agent; `coolingOff` (the device was disconnected for its misdeeds) and
 * `tooManyFailures` (its address failed too many handshakes) say how long to wait, in the error's
 * `data` ({@link handshakeWaitSchema}) and in the message: `cooling_off: retry after 10000 ms`.
 */
export const HANDSHAKE_ERRORS = {
  token: 'invalid_device_token',
  protocol: 'unsupported_protocol',
  coolingOff: 'cooling_off',
  tooManyFailures: 'too_many_failed_handshakes',
} as const;

/** The `data` of a refusal that asks the device to wait: try again no sooner than this. */
export const handshakeWaitSchema = z.object({ retry_after_ms: z.number().int().min(0) });
export type HandshakeWait = z.infer<typeof handshakeWaitSchema>;

/** The handshake's `auth`: the device token, and the protocol version the agent speaks. */
export const handshakeAuthSchema = z.object({ token: z.string().max(200), protocol: z.number().int() });
export type DeviceHandshakeAuth = z.infer<typeof handshakeAuthSchema>;

/** What the dispatcher knows of an authenticated socket. */
export interface DeviceSocketData {
  deviceId: string;
  orgId: string | null;
  name: string;
  /** The first 16 hex digits of the token's SHA-256: what the dispatcher keys its cooling-off by. */
  tokenKey: string;
  /** The protocol version the agent speaks (its handshake's), one of SERVED_PROTOCOL_VERSIONS. */
  protocol: number;
}
