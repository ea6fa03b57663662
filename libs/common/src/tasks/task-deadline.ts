import type { AppConfig } from '../config/config';

/**
 * Past the longest a task can be in flight (a queued period, then the longest a request may last),
 * this much more before anyone ends it for good: the api ends its own tasks at those bounds, with
 * timers that fire a little late on a busy machine; the reaper must not end them first.
 */
export const DEADLINE_MARGIN_MS = 60_000;

/** The settings a task's deadline is made of. */
export type TaskTimeouts = Pick<AppConfig, 'QUEUE_TIMEOUT_MS' | 'MAX_STREAM_MS'>;

/**
 * How long a task may be in flight before it is overdue: the queue timeout plus the longest a request
 * may last, plus DEADLINE_MARGIN_MS. Also how long the api's limit slots live unreleased.
 */
export function taskLifetimeMs(timeouts: TaskTimeouts): number {
  return timeouts.QUEUE_TIMEOUT_MS + timeouts.MAX_STREAM_MS + DEADLINE_MARGIN_MS;
}

/**
 * The deadline (epoch ms) of a task queued at `queuedAt`: past it nobody can still end the task but
 * the reaper (its api died with it). Its state in Redis lives until then, and its entry in `sy:live`.
 */
export function taskDeadline(timeouts: TaskTimeouts, queuedAt: number): number {
  return queuedAt + taskLifetimeMs(timeouts);
}
