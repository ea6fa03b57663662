import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as markdown from 'prettier/plugins/markdown';
import { format } from 'prettier/standalone';
import { auditKindsTable } from './api-tables';
import { configTable, constantsTable, redisFieldsTables, redisKeysTable } from './architecture-tables';
import { replaceSection } from './generated-sections';

/** A document the code writes parts of, and what writes each part. */
interface GeneratedDocument {
  path: string;
  sections: Record<string, (root: string) => string>;
}

export const GENERATED_DOCUMENTS: GeneratedDocument[] = [
  {
    path: 'docs/architecture.md',
    sections: {
      'redis-keys': redisKeysTable,
      'redis-fields': redisFieldsTables,
      'config-durations': configTable,
      'code-durations': constantsTable,
    },
  },
  {
    path: 'docs/api.md',
    sections: {
      'audit-kinds': auditKindsTable,
    },
  },
];

/** A document as the code would write it now: its generated sections made again, then Prettier's format. */
export async function regenerate(root: string, doc: GeneratedDocument): Promise<string> {
  const file = join(root, doc.path);
  let text = readFileSync(file, 'utf8');
  for (const [name, make] of Object.entries(doc.sections)) {
    text = replaceSection(text, name, make(root));
  }
  // Prettier's standalone build (its main entry loads its parsers with a dynamic import, which Jest's
  // module runtime cannot follow), with the project's settings.
  const options = JSON.parse(readFileSync(join(root, '.prettierrc'), 'utf8')) as Record<string, unknown>;
  return format(text, { ...options, parser: 'markdown', plugins: [markdown] });
}
