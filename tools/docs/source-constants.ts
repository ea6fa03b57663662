import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';

/** A named time or size constant of the code, as the docs list it. */
export interface SourceConstant {
  name: string;
  /** Its value, as the code computes it. */
  value: number;
  /** ms or s, from its name's suffix. */
  unit: 'ms' | 's';
  /** The file it is declared in, from the project root. */
  file: string;
  /** The first sentence of its doc comment. */
  about: string;
}

/** Durations by naming convention: the name ends with the unit. */
const DURATION = /^[A-Z][A-Z0-9_]*_(MS|S)$/;

/** Every .ts file under `dir`, specs and generated code aside. */
function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      return entry.name === 'generated' || entry.name === 'node_modules' ? [] : sources(path);
    }
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.spec.ts') && !entry.name.endsWith('.d.ts')
      ? [path]
      : [];
  });
}

/** The value of a numeric expression of literals and constants already known in the file; null if it is not one. */
export function evaluate(node: ts.Expression, known: Map<string, number>): number | null {
  if (ts.isNumericLiteral(node)) {
    return Number(node.text.replaceAll('_', ''));
  }
  if (ts.isParenthesizedExpression(node)) {
    return evaluate(node.expression, known);
  }
  if (ts.isIdentifier(node)) {
    return known.get(node.text) ?? null;
  }
  if (ts.isBinaryExpression(node)) {
    const [a, b] = [evaluate(node.left, known), evaluate(node.right, known)];
    if (a === null || b === null) {
      return null;
    }
    const operators: Partial<Record<ts.SyntaxKind, (x: number, y: number) => number>> = {
      [ts.SyntaxKind.AsteriskToken]: (x, y) => x * y,
      [ts.SyntaxKind.PlusToken]: (x, y) => x + y,
      [ts.SyntaxKind.MinusToken]: (x, y) => x - y,
      [ts.SyntaxKind.SlashToken]: (x, y) => x / y,
    };
    return operators[node.operatorToken.kind]?.(a, b) ?? null;
  }
  return null;
}

/** The first sentence of a node's doc comment (or line comments right above it), on one line. */
export function firstSentence(node: ts.Node, source: ts.SourceFile): string {
  const ranges = ts.getLeadingCommentRanges(source.text, node.getFullStart()) ?? [];
  const text = ranges
    .map((r) => source.text.slice(r.pos, r.end))
    .join('\n')
    .replace(/^\s*\/\*\*?|\*\/\s*$/g, '')
    .split('\n')
    .map((line) => line.replace(/^\s*(\*|\/\/)\s?/, '').trim())
    .join(' ')
    .replace(/\s+/g, ' ')
    .trim();
  const end = text.search(/\.(\s|$)/);
  return (end >= 0 ? text.slice(0, end) : text).replace(/\|/g, '\\|');
}

/**
 * The duration constants of the code (a top-level `const NAME_MS = …` or `NAME_S`, whose value is a
 * computable number), with their doc comments: the docs' table of timeouts and intervals is made from
 * them, so that it cannot say another value than the code.
 */
export function durationConstants(root: string, dirs: string[]): SourceConstant[] {
  const found: SourceConstant[] = [];
  for (const file of dirs.flatMap((dir) => sources(join(root, dir)))) {
    const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.ES2022, true);
    const known = new Map<string, number>();
    // A constant declared right under another (no blank line) shares its comment: `FRESH_MS`, `STALE_MS`.
    let previous: { about: string; end: number } | null = null;
    for (const statement of source.statements) {
      if (!ts.isVariableStatement(statement) || !(statement.declarationList.flags & ts.NodeFlags.Const)) {
        continue;
      }
      for (const declaration of statement.declarationList.declarations) {
        if (!ts.isIdentifier(declaration.name) || !declaration.initializer) {
          continue;
        }
        const value = evaluate(declaration.initializer, known);
        if (value === null) {
          continue;
        }
        const name = declaration.name.text;
        known.set(name, value);
        const own = firstSentence(statement, source);
        const adjacent: boolean =
          previous !== null && !/\n\s*\n/.test(source.text.slice(previous.end, statement.getStart()));
        const about: string = own || (adjacent && previous ? previous.about : '');
        previous = { about, end: statement.getEnd() };
        const unit = DURATION.exec(name)?.[1];
        if (unit) {
          found.push({ name, value, unit: unit === 'MS' ? 'ms' : 's', file: relative(root, file), about });
        }
      }
    }
  }
  return found.sort((a, b) => a.file.localeCompare(b.file) || a.name.localeCompare(b.name));
}

/** A duration as people read it: 250 ms, 1.5 s, 10 min, 6 h. */
export function humanDuration(value: number, unit: 'ms' | 's'): string {
  const ms = unit === 's' ? value * 1_000 : value;
  const round = (x: number) => String(Math.round(x * 100) / 100);
  if (ms < 1_000) {
    return `${round(ms)} ms`;
  }
  if (ms < 60_000 || ms % 60_000 !== 0) {
    return `${round(ms / 1_000)} s`;
  }
  if (ms < 3_600_000 || ms % 3_600_000 !== 0) {
    return `${round(ms / 60_000)} min`;
  }
  return `${round(ms / 3_600_000)} h`;
}
