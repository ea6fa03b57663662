/*
 * What an audit entry changed, field by field. No imports: the dashboard's bundle takes this file as it
 * is, besides the CLI.
 */

/** One field an admin change set: its value before and after (undefined: the field was not there). */
export interface AuditFieldChange {
  field: string;
  before: unknown;
  after: unknown;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * The fields whose values differ between an entry's `before` and `after`, in the order they first
 * appear; inside an object both sides hold, by dotted path (`trust.state`). A creation (no `before`) or a
 * removal (no `after`) lists every top-level field of the other side.
 */
export function auditDiff(before: unknown, after: unknown, prefix = ''): AuditFieldChange[] {
  const b = isObject(before) ? before : {};
  const a = isObject(after) ? after : {};
  const fields = [...new Set([...Object.keys(b), ...Object.keys(a)])];
  return fields.flatMap((field) => {
    if (JSON.stringify(b[field]) === JSON.stringify(a[field])) {
      return [];
    }
    if (isObject(b[field]) && isObject(a[field])) {
      return auditDiff(b[field], a[field], `${prefix}${field}.`);
    }
    return [{ field: `${prefix}${field}`, before: b[field], after: a[field] }];
  });
}

/** A value in one line: JSON for anything but a plain string, `–` for none. */
function shown(value: unknown): string {
  if (value === undefined) {
    return '–';
  }
  return typeof value === 'string' ? value : JSON.stringify(value);
}

/** The changes in one line each: `rpm_limit: null → 60`; a created or removed object's fields as `field: value`. */
export function auditChangeLines(before: unknown, after: unknown): string[] {
  const changes = auditDiff(before, after);
  if (before === null || after === null) {
    return changes.map((c) => `${c.field}: ${shown(before === null ? c.after : c.before)}`);
  }
  return changes.map((c) => `${c.field}: ${shown(c.before)} → ${shown(c.after)}`);
}
