import type { TaskStatus } from '../prisma/generated/enums';

/**
 * Every task status, and whether a task in it is live (a transition may still move it) or ended
 * (nothing moves it again). The one definition of the task status sets: the transitions script, the
 * Postgres fallback, the reaper, the usage SQL and the OpenAPI enum derive theirs from it. Its type
 * fails to compile when the `task_status` enum gains a status that is not placed here.
 */
const PHASE = {
  queued: 'live',
  assigned: 'live',
  streaming: 'live',
  completed: 'ended',
  failed: 'ended',
  cancelled: 'ended',
  timed_out: 'ended',
} as const satisfies Record<TaskStatus, 'live' | 'ended'>;

type Phase = typeof PHASE;

/** A status a transition may still move the task from. */
export type LiveStatus = { [S in TaskStatus]: Phase[S] extends 'live' ? S : never }[TaskStatus];
/** A terminal status. */
export type EndedStatus = Exclude<TaskStatus, LiveStatus>;

/** Every status, in the lifecycle's order (the `task_status` enum's). */
export const TASK_STATUSES = Object.keys(PHASE) as [TaskStatus, ...TaskStatus[]];
/** The statuses of a task in flight. */
export const LIVE_STATUSES = TASK_STATUSES.filter((s) => PHASE[s] === 'live') as LiveStatus[];
/** The terminal statuses. */
export const ENDED_STATUSES = TASK_STATUSES.filter((s) => PHASE[s] === 'ended') as EndedStatus[];
/** The endings that count as errors (the dashboard's traffic): a cancellation is the client's choice. */
export const ERROR_STATUSES = ['failed', 'timed_out'] as const satisfies readonly EndedStatus[];

export function isEnded(status: TaskStatus): status is EndedStatus {
  return PHASE[status] === 'ended';
}

/**
 * A set of statuses as an SQL list, `('a', 'b')`, for statements that spell one: the values are the
 * enum's own, never input.
 */
export function sqlStatusList(statuses: readonly TaskStatus[]): string {
  return `(${statuses.map((s) => `'${s}'`).join(', ')})`;
}
