import { z } from 'zod';
import type { Feature } from './chat';
import { CURRENT_DIALECT } from './catalog';
import type { ProtocolDialect } from './catalog';
import type { AnnounceAck, AssignPayload, DeviceErrorCode } from './messages';
import { DEVICE_ERROR_CODES, announceSchema, taskErrorSchema } from './messages';

/**
 * Protocol version 1, as agents released before version 2 speak it, bridged to the current version
 * (2) by the dispatcher. Events, names and the rest of the messages are the same. What differs:
 * - `task:error`: any code of lowercase letters and underscores. A code outside DEVICE_ERROR_CODES is
 *   read as `backend_error`: a client only ever sees codes Switchyard chose.
 * - `announce`: version 1's features (no `web_search`); an announce with another is invalid, as it was,
 *   so requests that need a feature this version lacks never go to such a device.
 * - the announce ack: `{ ok, device_id, pool }`, without the models accepted and refused.
 * - `task:assign`: params without the fields version 1 does not know (`web_search_options`,
 *   `include_stop_str_in_output`): such a device follows OpenAI's default for stop strings.
 */
export const PROTOCOL_1_VERSION = 1;

const VERSION_1_FEATURES = [
  'tools',
  'json_object',
  'json_schema',
  'logprobs',
  'n',
  'stream_usage',
  'logit_bias',
  'reasoning_effort',
] as const satisfies readonly Feature[];

const KNOWN_CODES: ReadonlySet<string> = new Set(DEVICE_ERROR_CODES);

const announce = announceSchema.extend({
  features: z.array(z.enum(VERSION_1_FEATURES)).max(VERSION_1_FEATURES.length),
});

const taskError = taskErrorSchema.extend({ code: z.string().regex(/^[a-z_]{1,64}$/) }).transform((error) => ({
  ...error,
  code: KNOWN_CODES.has(error.code) ? (error.code as DeviceErrorCode) : ('backend_error' as const),
}));

function announceAck(answer: AnnounceAck): unknown {
  return answer.ok ? { ok: true, device_id: answer.device_id, pool: answer.pool } : answer;
}

function assign(message: AssignPayload): unknown {
  const { web_search_options: _search, include_stop_str_in_output: _stop, ...params } = message.params;
  return { ...message, params };
}

/** The dispatcher's dialect of version 1: the current one, but for the differences above. */
export const PROTOCOL_1_DIALECT: ProtocolDialect = {
  version: PROTOCOL_1_VERSION,
  fromDevice: {
    messages: { ...CURRENT_DIALECT.fromDevice.messages, announce, 'task:error': taskError },
    answers: { ...CURRENT_DIALECT.fromDevice.answers, announce: announceAck },
  },
  toDevice: {
    messages: { ...CURRENT_DIALECT.toDevice.messages, 'task:assign': assign },
    answers: CURRENT_DIALECT.toDevice.answers,
  },
};
