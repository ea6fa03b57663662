import type { AnnounceAck, RefusalReason } from './messages';
import { CURRENT_DIALECT } from './catalog';
import type { ProtocolDialect } from './catalog';
import { announceSchema } from './messages';

/**
 * Protocol version 2, as agents released before version 3 speak it, bridged to the current version
 * (3) by the dispatcher. Events, names and the rest of the messages are the same. What differs:
 * - `announce`: without `identities`; read as an announce that says nothing of its models, so a model
 *   whose digests an admin pinned is refused to such a device (`digest_unknown`).
 * - the announce ack: version 2's refusal reasons; the digest refusals and `quarantined`, which it does
 *   not know (its ack validation would reject the whole answer), are written as `not_allowed`.
 */
export const PROTOCOL_2_VERSION = 2;

/** Version 2 refuses with these; anything newer is `not_allowed` to it. */
const VERSION_2_REASONS: ReadonlySet<RefusalReason> = new Set([
  'unknown_model',
  'not_enabled',
  'not_allowed',
  'not_network',
]);

const announce = announceSchema.omit({ identities: true }).transform((message) => ({ ...message, identities: [] }));

function announceAck(answer: AnnounceAck): unknown {
  if (!answer.ok) {
    return answer;
  }
  return {
    ...answer,
    refused: answer.refused.map((r) => ({
      model: r.model,
      reason: VERSION_2_REASONS.has(r.reason) ? r.reason : 'not_allowed',
    })),
  };
}

/** The dispatcher's dialect of version 2: the current one, but for the differences above. */
export const PROTOCOL_2_DIALECT: ProtocolDialect = {
  version: PROTOCOL_2_VERSION,
  fromDevice: {
    messages: { ...CURRENT_DIALECT.fromDevice.messages, announce },
    answers: { ...CURRENT_DIALECT.fromDevice.answers, announce: announceAck },
  },
  toDevice: CURRENT_DIALECT.toDevice,
};
