/** Who counted a task's tokens, as the task record says it: the device (reported) or Switchyard (relayed). */
export type UsageSource = 'device' | 'relay';

/**
 * Adds `source` to a task view's `usage` (null when the record does not say, as for tasks recorded
 * before it was kept). A view without usage stays as it is.
 */
export function withUsageSource<V extends { usage: object | null }>(view: V, source: string | null) {
  return { ...view, usage: view.usage ? { ...view.usage, source: (source as UsageSource | null) ?? null } : null };
}
