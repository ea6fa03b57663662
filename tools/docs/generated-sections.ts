/**
 * The parts of a document the code writes: between `<!-- generated:<name>:start -->` and
 * `<!-- generated:<name>:end -->` (comments Markdown does not show), the rest left as people wrote it.
 */
export function replaceSection(document: string, name: string, content: string): string {
  const start = `<!-- generated:${name}:start -->`;
  const end = `<!-- generated:${name}:end -->`;
  const from = document.indexOf(start);
  const to = document.indexOf(end);
  if (from < 0 || to < from) {
    throw new Error(`the document has no generated section '${name}' (${start} … ${end})`);
  }
  return `${document.slice(0, from + start.length)}\n\n${content.trim()}\n\n${document.slice(to)}`;
}

/** A Markdown table. */
export function markdownTable(headers: string[], rows: string[][]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length), 3));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i])).join(' | ')} |`;
  return [line(headers), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}
