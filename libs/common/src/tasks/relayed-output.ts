import { createHash } from 'node:crypto';
import type { TaskSegment } from '../queues/queues';
import type { StreamEntry } from '../queues/task-events';

/** A task stream's entry with its id (`<epoch ms>-<n>`, the time Redis added it). */
export interface TimedEntry {
  id: string;
  entry: StreamEntry;
}

/** What a client has received of a task, read from its stream as the api read it. */
export interface RelayedOutput {
  /** Choice 0's text, every attempt's output in order. */
  text: string;
  /** Output pieces relayed, as the relay counts them (a piece is a token, a piece with logprobs one per entry). */
  tokens: number;
  /** Each attempt that produced output; the last one's `ended` is the caller's to say. */
  segments: TaskSegment[];
  /**
   * Whether another device can continue it: only text was relayed. A tool call or reasoning cannot be
   * given back to a runtime as the start of its reply; neither can a stream with a gap or an ending.
   */
  continuable: boolean;
}

function entryTime(id: string): string {
  return new Date(Number(id.slice(0, id.indexOf('-')))).toISOString();
}

/**
 * The output a task's stream holds, read exactly as the api reads it (see Flight.onEntry): entries of
 * an earlier attempt than the latest seen and events already seen are dropped, and each attempt's
 * output follows the previous one's only across a `resumed` event.
 */
export function relayedOutput(entries: TimedEntry[]): RelayedOutput {
  const out: RelayedOutput = { text: '', tokens: 0, segments: [], continuable: true };
  let attempt = 0;
  let nextSeq = 0;
  let segment: (TaskSegment & { hash: ReturnType<typeof createHash> }) | null = null;
  const close = (ended: string) => {
    if (segment && segment.tokens > 0) {
      const { hash, ...rest } = segment;
      out.segments.push({ ...rest, sha256: hash.digest('hex'), ended });
    }
    segment = null;
  };
  for (const { id, entry } of entries) {
    if (entry.attempt === null) {
      // Written outside an assignment (by a survivor of its dispatcher): a requeue, a resume, an ending.
      for (const event of entry.events) {
        if (event.type === 'resumed' || event.type === 'requeued') {
          close(event.type === 'resumed' ? event.reason : 'requeued');
        } else if (event.type === 'error' || event.type === 'done') {
          out.continuable = false;
        }
      }
      continue;
    }
    if (entry.attempt < attempt) {
      continue;
    }
    if (entry.attempt > attempt) {
      attempt = entry.attempt;
      nextSeq = 0;
    }
    if (entry.seq > nextSeq) {
      out.continuable = false;
      continue;
    }
    const events = entry.events.slice(nextSeq - entry.seq);
    nextSeq += events.length;
    const at = entryTime(id);
    for (const event of events) {
      switch (event.type) {
        case 'assigned':
          close('requeued');
          segment = {
            attempt: event.attempt,
            device_id: event.device_id,
            assigned_at: at,
            first_output_at: null,
            last_output_at: null,
            tokens: 0,
            bytes: 0,
            sha256: '',
            ended: '',
            hash: createHash('sha256'),
          };
          break;
        case 'delta':
          for (const choice of event.choices) {
            if (choice.index !== 0 || choice.tool_calls?.length || choice.reasoning) {
              out.continuable = false;
            }
            const text = choice.content ?? '';
            const pieces = choice.logprobs?.length || (text.length > 0 ? 1 : 0);
            out.text += text;
            out.tokens += pieces;
            if (segment) {
              segment.first_output_at ??= at;
              segment.last_output_at = at;
              segment.tokens += pieces;
              segment.bytes += Buffer.byteLength(text);
              segment.hash.update(text);
            }
          }
          break;
        case 'resumed':
          close(event.reason);
          break;
        case 'requeued':
          close('requeued');
          break;
        // An embedding's vectors are no answer a device could continue, as an ended one is not.
        case 'done':
        case 'error':
        case 'embedding':
          out.continuable = false;
          break;
      }
    }
  }
  close('');
  return out;
}
