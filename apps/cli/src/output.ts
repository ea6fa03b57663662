/** Human-readable rendering of the admin results: `key: value` lines for one record, a table for a list. */
export function renderHuman(value: unknown): string {
  if (Array.isArray(value)) {
    return renderTable(value as Record<string, unknown>[]);
  }
  if (value && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>);
    const width = Math.max(...entries.map(([k]) => k.length));
    return entries.map(([k, v]) => `${k.padEnd(width)}  ${cell(v)}`).join('\n') + '\n';
  }
  return `${String(value)}\n`;
}

function cell(v: unknown): string {
  if (v === null || v === undefined) {
    return '-';
  }
  if (Array.isArray(v)) {
    return v.length ? v.map(cell).join(',') : '-';
  }
  if (typeof v === 'string') {
    return v;
  }
  return typeof v === 'number' || typeof v === 'boolean' ? String(v) : JSON.stringify(v);
}

function renderTable(rows: Record<string, unknown>[]): string {
  if (rows.length === 0) {
    return '(none)\n';
  }
  const columns = Object.keys(rows[0]);
  const cells = rows.map((r) => columns.map((c) => cell(r[c])));
  const widths = columns.map((c, i) => Math.max(c.length, ...cells.map((r) => r[i].length)));
  const line = (values: string[]) =>
    values
      .map((v, i) => v.padEnd(widths[i]))
      .join('  ')
      .trimEnd();
  return [line(columns.map((c) => c.toUpperCase())), ...cells.map(line)].join('\n') + '\n';
}
