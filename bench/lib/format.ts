/** Number formatting and Markdown tables for the report. */

/** 1 decimal below 100, whole numbers above; an em dash for no value. */
export function num(value: number | null | undefined, digits?: number): string {
  if (value === null || value === undefined || !Number.isFinite(value)) {
    return '—';
  }
  const d = digits ?? (Math.abs(value) < 100 ? 1 : 0);
  return value.toFixed(d);
}

/** A signed difference, e.g. +3.2 or −0.4. */
export function signed(value: number | null | undefined, digits = 1): string {
  if (value === null || value === undefined || !Number.isFinite(value)) {
    return '—';
  }
  const text = Math.abs(value).toFixed(digits);
  return value < 0 && Number(text) !== 0 ? `−${text}` : `+${text}`;
}

export function mb(bytes: number | null | undefined): string {
  return bytes === null || bytes === undefined ? '—' : `${(bytes / 2 ** 20).toFixed(1)} MB`;
}

export function kb(bytes: number | null | undefined): string {
  return bytes === null || bytes === undefined || !Number.isFinite(bytes) ? '—' : `${(bytes / 1024).toFixed(1)} KB`;
}

export function passText(pass: boolean | null, floorMisses = false): string {
  return pass === null ? 'n/a' : pass ? 'PASS' : floorMisses ? 'MISS (floor misses too)' : 'MISS';
}

/** A Markdown table; `align` per column: l or r. */
export function mdTable(headers: string[], rows: string[][], align?: ('l' | 'r')[]): string {
  const line = (cells: string[]) => `| ${cells.map((c) => c.replace(/\|/g, '\\|')).join(' | ')} |`;
  const rule = headers.map((_, i) => ((align?.[i] ?? 'l') === 'r' ? '---:' : '---'));
  return [line(headers), `| ${rule.join(' | ')} |`, ...rows.map(line)].join('\n');
}
