/** A value as a cell's text: a dash for nothing, a list joined with commas, an object as JSON. */
export function text(v: unknown): string {
  if (v === null || v === undefined || v === '') {
    return '–';
  }
  if (Array.isArray(v)) {
    return v.map(String).join(', ') || '–';
  }
  return typeof v === 'object' ? JSON.stringify(v) : `${v as string | number | boolean}`;
}

/** How long ago an ISO time was, in the largest two units (`42s`, `3m 5s`, `2h 10m`). */
export function since(iso: string | null): string {
  if (!iso) {
    return '–';
  }
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  return s < 60
    ? `${s}s`
    : s < 3600
      ? `${Math.floor(s / 60)}m ${s % 60}s`
      : `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}

/** A latency in milliseconds, or a dash when there is none. */
export function ms(value: number | null | undefined): string {
  return value === null || value === undefined ? '–' : `${value} ms`;
}
