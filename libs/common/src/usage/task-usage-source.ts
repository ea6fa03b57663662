/** Who counted a task's tokens, as the task record says it: the device (reported) or Switchyard (relayed). */
export type UsageSource = 'device' | 'relay';

/**
 * Adds `source` to a task view's `usage` when the record says who counted it (records written before
 * the relay core fills usage_source do not: their usage stays as it was). A view without usage stays
 * as it is.
 */
export function withUsageSource<V extends { usage: object | null }>(view: V, source: string | null) {
  return view.usage && source !== null ? { ...view, usage: { ...view.usage, source: source as UsageSource } } : view;
}
