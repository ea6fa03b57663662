import type { JobsOptions } from 'bullmq';
import type { ChatParams, Feature } from '../protocol/chat';
import type { EmbedParams } from '../protocol/embeddings';

/**
 * Queue contracts. These names are persisted in Redis: changing them strands queued jobs and task
 * streams of a running deployment.
 *
 * A queue serves one (model, pool); pool = `network` or an organization id. Within a queue each
 * organization has a line of its own, one BullMQ queue per line, so that devices can take work from
 * organizations in turn (see fair-share.ts); a direct pool has one line, its organization's.
 */
/** The pool of the shared network; any other pool is an organization id. */
export const NETWORK_POOL = 'network';
export const CHAT_JOB = 'chat';

/**
 * The queue of a (model, pool). BullMQ queue names may not contain `:`, which model ids do
 * (`llama3.2:3b`), so the model id is percent-encoded (`:` → %3A, `/` → %2F, `.` → %2E).
 */
export function queueName(modelId: string, pool: string): string {
  return `chat.${pool}.${encodeURIComponent(modelId).replace(/\./g, '%2E')}`;
}

/** An organization's line in a queue: the BullMQ queue its jobs wait in. */
export function lineName(queue: string, orgId: string): string {
  return `${queue}.${orgId}`;
}

/** The queue a line belongs to (org ids hold no dot). */
export function queueOfLine(line: string): string {
  return line.slice(0, line.lastIndexOf('.'));
}

/** What every job carries, whatever its kind. Only the request text is sensitive; jobs are removed when they end. */
interface JobBase {
  v: 2;
  taskId: string;
  taskAddress: string;
  orgId: string;
  model: string;
  pool: string;
  requires: Feature[];
  /** The api instance that holds the client (a dispatcher stops the task when that api is gone). */
  apiInstance: string;
  /** The api's request id, for logs. */
  requestId?: string;
  /**
   * The W3C `traceparent` of the api's request span, when traces are exported: the dispatcher's spans
   * of the task are its children (docs/operations.md, "Traces").
   */
  traceparent?: string;
  /**
   * Devices that failed this task (an embedding batch, retried on another device): it is not given
   * back to them.
   */
  avoid?: string[];
}

/** The payload of a chat job (`kind` is absent in every job before embeddings). */
export interface ChatJobData extends JobBase {
  kind?: 'chat';
  params: ChatParams;
  /**
   * Whether the client streams: when false, the dispatcher may hold output for the ending (see
   * TaskWriter). Absent in jobs of apis older than this field: taken as streaming.
   */
  stream?: boolean;
  /**
   * Whether the task may continue on another device when its device is lost after output reached the
   * client (its organization allows it, one choice, no json_schema). Absent in older apis' jobs: no.
   */
  resume?: boolean;
  /** Set while a resumed task waits: what the client already has, for the next device to continue. */
  continued?: Continuation;
}

/** The payload of an embedding job: one batch of a request's inputs. */
export interface EmbedJobData extends JobBase {
  kind: 'embed';
  embed: EmbedParams;
}

/** A job's payload. */
export type JobData = ChatJobData | EmbedJobData;

/**
 * What a resumed task's client already has (see Resumer): the answer so far, the tokens Switchyard
 * counted as it relayed them, and who produced which part. `params` keep the original request; the
 * assignment adds the prefix and reduces max_tokens.
 */
export interface Continuation {
  /** The answer's text so far (choice 0's content). */
  text: string;
  /** Output tokens relayed so far (as counted by the relay: one per piece of output). */
  tokens: number;
  /** How many times the task has been resumed (the claim checks it against the task's state). */
  resumes: number;
  /** The segments so far, oldest first. */
  segments: TaskSegment[];
}

/** One device's part of a resumed answer (a task record's `segments`). */
export interface TaskSegment {
  attempt: number;
  /** The device, as the task stream named it (its id). */
  device_id: string;
  /** When the device was assigned, its first and last output reached the relay (ISO 8601). */
  assigned_at: string | null;
  first_output_at: string | null;
  last_output_at: string | null;
  /** Output pieces relayed (tokens as Switchyard counts them) and their UTF-8 bytes. */
  tokens: number;
  bytes: number;
  /** SHA-256 (hex) of the segment's text. */
  sha256: string;
  /** Why it ended: a resume cause (`device_disconnected`, `device_timeout`, `dispatcher_lost`, a device's code), or `completed`. */
  ended: string;
}

/**
 * Options for every chat job: the job id is the task id; nothing outlives the task in Redis. Attempts
 * are the task's, counted by its transitions; BullMQ's retries are not used.
 */
export function chatJobOptions(taskId: string): JobsOptions {
  return { jobId: taskId, removeOnComplete: true, removeOnFail: true };
}

/** How long a presence entry lives without renewal; dispatchers renew every third of it. */
export const PRESENCE_TTL_MS = 15_000;
/** A finished task's stream is kept this long so that a slow reader can still drain it. */
export const TASK_STREAM_TTL_S = 600;

export function encodePresenceMember(deviceId: string, features: readonly Feature[]): string {
  return `${deviceId}|${[...features].sort().join(',')}`;
}

export function decodePresenceMember(member: string): { deviceId: string; features: Feature[] } {
  const [deviceId, list = ''] = member.split('|');
  return { deviceId, features: list ? (list.split(',') as Feature[]) : [] };
}
