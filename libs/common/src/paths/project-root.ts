import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

let root: string | null = null;

/**
 * The project's root directory (where package.json names `switchyard`), found from this file up:
 * the same from the TypeScript sources, from dist/ and from a test build.
 */
export function projectRoot(): string {
  if (root) {
    return root;
  }
  for (let dir = __dirname; ; dir = dirname(dir)) {
    const manifest = join(dir, 'package.json');
    if (
      existsSync(manifest) &&
      (JSON.parse(readFileSync(manifest, 'utf8')) as { name?: string }).name === 'switchyard'
    ) {
      root = dir;
      return dir;
    }
    if (dirname(dir) === dir) {
      throw new Error(`the switchyard project root was not found above ${__dirname}`);
    }
  }
}

/** A path inside the project, such as `prisma/migrations`. */
export function projectPath(relative: string): string {
  return join(projectRoot(), relative);
}
