import { mkdir, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join, relative } from 'node:path';
import { transformFile } from '@swc/core';
import type { Options } from '@swc/core';
import { projectPath } from '../../libs/common/src/paths/project-root';

/** Where the e2e builds live: inside the project, so that their `require`s find node_modules. */
const BUILDS = projectPath('node_modules/.cache/switchyard-test');
/** Builds of runs that ended without their teardown (killed) are removed after this long. */
const STALE_MS = 6 * 3_600_000;

async function sources(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true });
  const nested = await Promise.all(
    entries.map(async (e) => {
      const path = join(dir, e.name);
      if (e.isDirectory()) {
        return sources(path);
      }
      return e.name.endsWith('.ts') && !e.name.endsWith('.spec.ts') && !e.name.endsWith('.d.ts') ? [path] : [];
    }),
  );
  return nested.flat();
}

async function removeStale(): Promise<void> {
  const runs = await readdir(BUILDS).catch(() => [] as string[]);
  await Promise.all(
    runs.map(async (name) => {
      const path = join(BUILDS, name);
      const info = await stat(path).catch(() => null);
      if (info && Date.now() - info.mtimeMs > STALE_MS) {
        await rm(path, { recursive: true, force: true });
      }
    }),
  );
}

/**
 * Transpiles apps/ and libs/ (specs aside) into a fresh directory with SWC, the same transform the
 * tests load through, and returns the directory. About a second for the whole tree; a file that
 * was removed or renamed in the sources cannot survive here.
 */
export async function buildForTests(run: string): Promise<string> {
  await removeStale();
  const root = projectPath('.');
  const out = join(BUILDS, run);
  const options: Options = {
    jsc: {
      parser: { syntax: 'typescript', decorators: true },
      transform: { legacyDecorator: true, decoratorMetadata: true },
      target: 'es2022',
      keepClassNames: true,
      baseUrl: root,
      paths: { '@app/common': ['libs/common/src'], '@app/common/*': ['libs/common/src/*'] },
    },
    module: { type: 'commonjs' },
    sourceMaps: 'inline',
    swcrc: false,
  };
  const files = [...(await sources(join(root, 'apps'))), ...(await sources(join(root, 'libs')))];
  await Promise.all(
    files.map(async (file) => {
      const { code } = await transformFile(file, { ...options, filename: file });
      const target = join(out, relative(root, file)).replace(/\.ts$/, '.js');
      await mkdir(dirname(target), { recursive: true });
      await writeFile(target, code);
    }),
  );
  return out;
}
