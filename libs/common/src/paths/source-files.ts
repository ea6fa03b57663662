import { readdirSync } from 'node:fs';
import { join } from 'node:path';

/**
 * The TypeScript sources below `dir`, for the checks that read the code as text (key names, Lua
 * scripts): specs (which pin names on purpose), declarations and generated code aside.
 */
export function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      return ['generated', 'node_modules', 'dist'].includes(entry.name) ? [] : sourceFiles(path);
    }
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.spec.ts') && !entry.name.endsWith('.d.ts')
      ? [path]
      : [];
  });
}
