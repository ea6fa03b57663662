import type { JobsOptions } from 'bullmq';
import type { ChatParams, Feature } from '../protocol/chat';

/**
 * Queue contracts. These names are persisted in Redis: changing them strands queued jobs and
 * task streams of a running deployment.
 */
export const QUEUE_PREFIX = 'sy';
/** The pool of the shared network; any other pool is an organization id. */
export const NETWORK_POOL = 'network';
export const CHAT_JOB = 'chat';

/**
 * The queue of a (model, pool). BullMQ queue names may not contain `:`, which model ids do
 * (`llama3.2:3b`), so the model id is percent-encoded (`:` → %3A, `/` → %2F).
 */
export function queueName(modelId: string, pool: string): string {
  return `chat.${pool}.${encodeURIComponent(modelId).replace(/\./g, '%2E')}`;
}

/** The payload of a chat job. Only the request text is sensitive; jobs are removed when they end. */
export interface ChatJobData {
  v: 1;
  taskId: string;
  taskAddress: string;
  orgId: string;
  model: string;
  pool: string;
  params: ChatParams;
  requires: Feature[];
  /** The api's request id, for logs. */
  requestId?: string;
  /** Epoch ms after which the api has given up waiting (queue timeout). */
  deadline: number;
}

/** Options for every chat job: the job id is the task id; nothing outlives the task in Redis. */
export function chatJobOptions(taskId: string, attempts: number): JobsOptions {
  return {
    jobId: taskId,
    attempts,
    // The request text must not stay in Redis after the task ends.
    removeOnComplete: true,
    removeOnFail: true,
  };
}

/** A dispatcher keeps a job's lock this long and renews it at half that while the device works. */
export const JOB_LOCK_MS = 30_000;

/** Redis keys and channels outside BullMQ. */
export const keys = {
  /** The ordered events of one task, dispatcher → api. */
  taskStream: (taskId: string) => `sy:task:${taskId}`,
  /** Devices online for a (pool, model): sorted set of `deviceId|feature,feature` scored by expiry (epoch ms). */
  presence: (pool: string, modelId: string) => `sy:presence:${pool}:${modelId}`,
  /** Published by the api after enqueueing: the queue name that has a new job. */
  jobsChannel: 'sy:jobs',
  /** Published by the api when a client goes away: the task id to cancel. */
  cancelChannel: 'sy:cancel',
} as const;

/** How long a presence entry lives without renewal; dispatchers renew every third of it. */
export const PRESENCE_TTL_MS = 15_000;
/** A finished task's stream is kept this long so that a slow reader can still drain it. */
export const TASK_STREAM_TTL_S = 600;

/** Event types in a task stream. */
export type TaskEvent =
  | { type: 'assigned'; device_id: string; attempt: number }
  | { type: 'requeued'; reason: string }
  | { type: 'delta'; choices: import('../protocol/chat').ChoiceDelta[] }
  | {
      type: 'done';
      finish_reasons: import('../protocol/chat').FinishReason[];
      usage: import('../protocol/chat').Usage | null;
    }
  | { type: 'error'; code: string; message: string; status: number };

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
}

/** The fields of a stream entry (XADD's field-value list). */
export function encodeStreamEntry(attempt: number | null, seq: number, events: TaskEvent[]): string[] {
  const e = JSON.stringify(events);
  return attempt === null ? ['e', e] : ['a', String(attempt), 's', String(seq), 'e', e];
}

/** Reads the fields of a stream entry (as XREAD returns them); throws on a malformed one. */
export function decodeStreamEntry(fields: string[]): StreamEntry {
  let attempt: number | null = null;
  let seq = 0;
  let events: TaskEvent[] | null = null;
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
    }
  }
  if (!events || (attempt !== null && !Number.isInteger(attempt)) || !Number.isInteger(seq)) {
    throw new Error('malformed task stream entry');
  }
  return { attempt, seq, events };
}

export function encodePresenceMember(deviceId: string, features: readonly Feature[]): string {
  return `${deviceId}|${[...features].sort().join(',')}`;
}

export function decodePresenceMember(member: string): { deviceId: string; features: Feature[] } {
  const [deviceId, list = ''] = member.split('|');
  return { deviceId, features: list ? (list.split(',') as Feature[]) : [] };
}
