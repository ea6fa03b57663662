import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { GENERATED_DOCUMENTS, regenerate } from './generate';

/**
 * `npm run docs:generate`: writes the tables of docs/ that the code can produce (see generate.ts), so
 * that they cannot disagree with it; tools/docs/docs.spec.ts fails when they are stale.
 */
async function main(): Promise<void> {
  const root = join(__dirname, '..', '..', '..');
  for (const doc of GENERATED_DOCUMENTS) {
    const file = join(root, doc.path);
    const next = await regenerate(root, doc);
    if (next !== readFileSync(file, 'utf8')) {
      writeFileSync(file, next);
      process.stdout.write(`wrote ${doc.path}\n`);
    } else {
      process.stdout.write(`${doc.path} is up to date\n`);
    }
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
