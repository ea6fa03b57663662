import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

/** The folders of the repository a document may name files in. */
const TOP = '(?:apps|libs|test|bench|web|scripts|prisma|docs|tools)';
/** A path in backticks: `apps/api/src/bootstrap.ts`, `test/hostile/` (placeholders and globs are not paths). */
const CODE_PATH = new RegExp(`\`(${TOP}/[A-Za-z0-9_./-]+)\``, 'g');
/** A relative Markdown link: [text](operations.md#redis), [text](../apps/device/README.md). */
const LINK = /\]\((?!https?:|#|mailto:)([^)#\s]+)(?:#[^)]*)?\)/g;

/** The documents whose paths must exist: README.md, docs/*.md, apps/*\/README.md. */
export function documents(root: string): string[] {
  const docs = readdirSync(join(root, 'docs')).filter((f) => f.endsWith('.md'));
  const apps = readdirSync(join(root, 'apps')).filter((app) => existsSync(join(root, 'apps', app, 'README.md')));
  return ['README.md', ...docs.map((f) => `docs/${f}`), ...apps.map((app) => `apps/${app}/README.md`)];
}

/** The paths a document names (in backticks, from the repository root; in links, from the document) that do not exist. */
export function missingPaths(root: string, document: string): string[] {
  const text = readFileSync(join(root, document), 'utf8');
  const missing: string[] = [];
  for (const [, path] of text.matchAll(CODE_PATH)) {
    const clean = path.replace(/[.,]$/, '');
    if (!existsSync(join(root, clean))) {
      missing.push(clean);
    }
  }
  for (const [, target] of text.matchAll(LINK)) {
    if (!existsSync(join(root, dirname(document), target))) {
      missing.push(target);
    }
  }
  return missing;
}
