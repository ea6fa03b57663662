import type { DeviceErrorCode } from '@app/common/protocol/device-protocol';
import { DEVICE_ERROR_CODES } from '@app/common/protocol/device-protocol';

/** The protocol bounds an error message to 2000 characters. */
const MAX_ERROR_MESSAGE = 2_000;

/** The protocol's error code for whatever a backend threw (`backend_error` when it has none of them). */
export function errorCode(error: unknown): DeviceErrorCode {
  const code = (error as { code?: unknown } | null)?.code;
  return (DEVICE_ERROR_CODES as readonly unknown[]).includes(code) ? (code as DeviceErrorCode) : 'backend_error';
}

/** What a backend's failure says, within the protocol's bound. */
export function errorMessage(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  return (message || 'the backend failed').slice(0, MAX_ERROR_MESSAGE);
}
