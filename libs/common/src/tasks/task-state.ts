import type { TaskApi, TaskKind, TaskMode, TaskStatus } from '../prisma/generated/enums';
import { taskStateCodec } from './task-state-codec';
import type { EndedStatus } from './task-statuses';
import type { BudgetScope } from '../budgets/spend-counter';

/** What a new task starts with (its job is enqueued right after). */
export interface NewTask {
  id: string;
  address: string;
  orgId: string;
  apiKeyId: string | null;
  modelId: string;
  mode: TaskMode;
  api: TaskApi;
  /** What it asks for: `chat` or `embedding` (one task per batch of inputs). */
  kind: TaskKind;
  stream: boolean;
  /** The queue line its job waits in. */
  line: string;
  /** The api instance holding the client. */
  apiInstance: string;
  /** Past this (epoch ms) nobody can still end the task: the reaper does (see taskDeadline). */
  deadline: number;
  /** Which monthly budgets its tokens count against when it ends (see budgetScope); null or absent: none. */
  budgets?: BudgetScope | null;
  /** The OpenTelemetry trace id of its request (32 hex digits), when traces are exported. */
  traceId?: string | null;
}

/** How a task ended. */
export interface Ending {
  status: EndedStatus;
  errorCode?: string | null;
  finishReason?: string | null;
  promptTokens?: number | null;
  completionTokens?: number | null;
  outputSha256?: string | null;
  /** UTF-8 bytes of output relayed to the client. */
  outputBytes?: number | null;
  /** Who counted the tokens: the device (its report), or the relay (what it relayed, for an early end). */
  usageSource?: 'device' | 'relay' | null;
  /** When the first output was relayed (epoch ms), if no earlier transition recorded it. */
  firstTokenAt?: number | null;
  /** A resumed task's segments (which device produced which part), as JSON (see TaskSegment). */
  segments?: string | null;
}

/**
 * Which state an ending may start from: any that is not terminal, only `queued` (a request that
 * waited too long or whose client left before a device took it), or only the given attempt (a
 * dispatcher ends only the assignment it holds).
 */
export type EndGuard = 'any' | 'queued' | { attempt: number };

/** A task's state as Redis holds it while the task is in flight (and a while after). */
export interface TaskSnapshot extends Omit<NewTask, 'deadline'> {
  status: TaskStatus;
  version: number;
  attempts: number;
  deviceId: string | null;
  dispatcherId: string | null;
  /** The BullMQ lock token of the current assignment. */
  token: string | null;
  /** The model digest the device of its last assignment announced; null when it announced none. */
  modelDigest: string | null;
  finishReason: string | null;
  errorCode: string | null;
  promptTokens: number | null;
  completionTokens: number | null;
  outputSha256: string | null;
  outputBytes: number | null;
  usageSource: 'device' | 'relay' | null;
  /** Resumes on another device after output reached the client (null: none). */
  resumes: number | null;
  segments: string | null;
  queuedAt: Date;
  assignedAt: Date | null;
  firstTokenAt: Date | null;
  finishedAt: Date | null;
}

/**
 * `recovered`: the task's state was gone from Redis (lost with a restart without persistence), and
 * the ending was written to its Postgres record directly.
 */
export type TransitionResult =
  { ok: true; attempt: number; recovered?: boolean } | { ok: false; status: TaskStatus | 'resumed' | null };

/** An event for the task's stream, as XADD field/value pairs (see encodeStreamEntry). */
export type StreamFields = string[];

/** Parses the hash of a task's state (see taskStateCodec); null when it holds no task (expired, never created). */
export function parseSnapshot(h: Record<string, string>): TaskSnapshot | null {
  if (!h[taskStateCodec.names.id] || !h[taskStateCodec.names.status]) {
    return null;
  }
  const { deadline: _deadline, budgets: _budgets, ...snapshot } = taskStateCodec.decode(h);
  return snapshot;
}
