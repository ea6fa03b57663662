import type { DeviceErrorCode } from '../protocol/device-protocol';
import type { ErrorCode } from './app-error';

/**
 * What a client sees for each code a device ends a task with (docs/api.md lists them). A device's
 * `model_not_found` means its runtime lacks the model, not that the caller may not use it (that is the
 * api's 404 `model_not_found`), so the client gets `model_unavailable`; a device's `cancelled` is not a
 * cancellation by the client, so it is a `device_error`.
 */
const CLIENT_CODE: Record<DeviceErrorCode, ErrorCode> = {
  model_not_found: 'model_unavailable',
  context_length_exceeded: 'context_length_exceeded',
  unsupported_by_model: 'unsupported_by_model',
  upstream_unauthorized: 'upstream_unauthorized',
  upstream_busy: 'upstream_busy',
  upstream_bad_request: 'upstream_bad_request',
  upstream_error: 'upstream_error',
  upstream_bad_response: 'upstream_bad_response',
  upstream_unreachable: 'upstream_unreachable',
  invalid_request: 'invalid_request',
  device_shutdown: 'device_shutdown',
  backend_error: 'backend_error',
  cancelled: 'device_error',
};

export function clientCodeOf(code: DeviceErrorCode): ErrorCode {
  return CLIENT_CODE[code];
}

/** The longest part of a device's own message that reaches a client. */
const MAX_DEVICE_MESSAGE = 300;

/**
 * File extensions that look like top-level domains to the bare-domain rule but name files a runtime's
 * error may well mention (`model.gguf`); none of them is a TLD.
 */
const FILE_EXTENSIONS = new Set(['gguf', 'ggml', 'bin', 'safetensors', 'json', 'yaml', 'yml', 'txt', 'log', 'onnx']);

/** Digits of a run that reads as a phone number: 9 or more (a date or a version has fewer). */
const PHONE_DIGITS = 9;

const digitsIn = (text: string) => text.replace(/\D/g, '').length;

/**
 * A device's message as another party may read it: a device is untrusted, so its text is capped,
 * stripped of what could send a reader elsewhere (URLs, domains, e-mail and network addresses, phone
 * numbers) and of invisible characters that could disguise them or reorder what is shown (bidi
 * overrides, zero-width characters), and said to come from the device. Fullwidth and other
 * compatibility forms are folded first (NFKC), so that `ｅｘａｍｐｌｅ．ｃｏｍ` is caught as well.
 */
export function deviceMessage(message: string): string {
  const cleaned = message
    .normalize('NFKC')
    // Format characters (bidi controls, zero-width spaces and joiners, soft hyphens): removed, so that
    // what they split is caught whole below.
    .replace(/\p{Cf}+/gu, '')
    .replace(/\b[a-z][a-z0-9+.-]*:\/\/\S+/gi, '[url]')
    .replace(/\b[\w.+-]+@[\w-]+(\.[\w-]+)+\b/g, '[address]')
    .replace(/\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b/g, '[address]')
    .replace(/\[?\b(?:[0-9a-f]{1,4}:){3,7}[0-9a-f]{1,4}\b\]?|\[?[0-9a-f:]*::[0-9a-f:]*\]?(:\d+)?/gi, '[address]')
    .replace(/\b[a-z0-9][a-z0-9.-]*:\d{2,5}\b/gi, '[address]')
    .replace(/\b(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+([a-z]{2,24})\b(\/\S*)?/gi, (domain, tld: string) =>
      FILE_EXTENSIONS.has(tld.toLowerCase()) ? domain : '[address]',
    )
    .replace(/\+?\(?\d[\d\s().-]{6,24}\d/g, (run) =>
      digitsIn(run) >= (run.startsWith('+') ? PHONE_DIGITS - 1 : PHONE_DIGITS) ? '[number]' : run,
    )
    // eslint-disable-next-line no-control-regex
    .replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]+/g, ' ')
    .trim();
  const capped = cleaned.length > MAX_DEVICE_MESSAGE ? `${cleaned.slice(0, MAX_DEVICE_MESSAGE)}…` : cleaned;
  return `The device could not complete the request. It reported: ${capped || '(no message)'}`;
}
