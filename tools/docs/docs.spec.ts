import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { documents, missingPaths } from './doc-paths';
import { GENERATED_DOCUMENTS, regenerate } from './generate';

const root = join(__dirname, '..', '..');

describe('the docs follow the code', () => {
  it.each(GENERATED_DOCUMENTS.map((d) => [d.path, d] as const))(
    "%s's generated tables are what the code says now (else: npm run docs:generate)",
    async (path, doc) => {
      const current = readFileSync(join(root, path), 'utf8');
      expect(await regenerate(root, doc)).toBe(current);
    },
  );

  it.each(documents(root))('every repository path %s names exists', (document) => {
    expect(missingPaths(root, document)).toEqual([]);
  });
});
