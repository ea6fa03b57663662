import type { ChoiceDelta, FinishReason, Usage } from '../protocol/chat';
import type { ErrorCode } from '../errors/app-error';
import type { EmbeddingVector } from '../protocol/embeddings';

/**
 * What travels dispatcher → api in a task's Redis stream. Errors carry a code only: the HTTP status
 * comes from the one table (ERROR_STATUS) at the edge.
 */
export type TaskEvent =
  | { type: 'assigned'; device_id: string; attempt: number }
  | { type: 'requeued'; reason: string }
  /**
   * The task's device was lost after output reached the client, and the task waits for another device
   * to continue the answer (its next attempt's output follows what the client already has).
   */
  | { type: 'resumed'; reason: string }
  | { type: 'delta'; choices: ChoiceDelta[] }
  /** Vectors of an embedding task (all of them, written with its `done`), by input index within the task. */
  | { type: 'embedding'; data: EmbeddingVector[] }
  /**
   * `choice_tokens`, with n > 1 only: each choice's output pieces as the relay counted them (for an
   * organization that follows the Nodea specification's usage, which counts one choice).
   */
  | { type: 'done'; finish_reasons: FinishReason[]; usage: Usage | null; choice_tokens?: number[] }
  | { type: 'error'; code: ErrorCode; message: string };

/** The error message of a task whose device left after part of the answer reached the client. */
export const DISCONNECTED_MID_ANSWER = 'The device serving this request disconnected before finishing its answer.';

/**
 * One entry of a task stream: a batch of events in order. Entries from an assignment carry its
 * attempt number and the sequence number of their first event (each attempt counts from 0), so a
 * reader can drop what it already has and notice what it lost; a terminal error written from
 * outside an assignment carries neither.
 */
export interface StreamEntry {
  attempt: number | null;
  seq: number;
  events: TaskEvent[];
  /**
   * How long (ms) the attempt's first output waited in the dispatcher before this entry carried it:
   * output held for a client that does not stream (field `h`, absent when it did not wait). The api
   * dates the first output back by it, for its time-to-first-token and tokens/s.
   */
  heldMs?: number;
}

/** The fields of a stream entry (XADD's field-value list). */
export function encodeStreamEntry(attempt: number | null, seq: number, events: TaskEvent[], heldMs = 0): string[] {
  const e = JSON.stringify(events);
  if (attempt === null) {
    return ['e', e];
  }
  const fields = ['a', String(attempt), 's', String(seq), 'e', e];
  if (heldMs > 0) {
    fields.push('h', String(Math.round(heldMs)));
  }
  return fields;
}

/** Reads the fields of a stream entry (as XREAD returns them); throws on a malformed one. */
export function decodeStreamEntry(fields: string[]): StreamEntry {
  let attempt: number | null = null;
  let seq = 0;
  let events: TaskEvent[] | null = null;
  let heldMs: number | undefined;
  for (let i = 0; i + 1 < fields.length; i += 2) {
    const value = fields[i + 1];
    switch (fields[i]) {
      case 'a':
        attempt = Number(value);
        break;
      case 's':
        seq = Number(value);
        break;
      case 'e': {
        const parsed = JSON.parse(value) as TaskEvent | TaskEvent[];
        events = Array.isArray(parsed) ? parsed : [parsed];
        break;
      }
      case 'h':
        heldMs = Number(value);
        break;
    }
  }
  if (!events || (attempt !== null && !Number.isInteger(attempt)) || !Number.isInteger(seq)) {
    throw new Error('malformed task stream entry');
  }
  return heldMs !== undefined && heldMs > 0 && Number.isFinite(heldMs)
    ? { attempt, seq, events, heldMs }
    : { attempt, seq, events };
}
