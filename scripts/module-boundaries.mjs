// Builds the ESLint configs that enforce the module arrows of docs/architecture.md ("Modules"), from
// the map in eslint.config.mjs. ESLint's no-restricted-imports matches the import as written, not
// the file it resolves to, so each folder gets patterns of its own depth: from
// apps/api/src/admin/orgs/, `../../ollama/x` is apps/api/src/ollama, while `../keys/x` is admin's keys.
import { readdirSync } from 'node:fs';
import { join } from 'node:path';

const escape = (name) => name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const up = (levels) => `^(\\.\\./){${levels}}`;

/**
 * One config per folder of sealed code, for the files directly in it (so that each file gets its
 * folder's whole set: a later config's no-restricted-imports would replace an earlier one's).
 *
 * @param {string} base the repository root
 * @param {{ root: string, composition: string[], shared?: string[], modules: Record<string, string[]>,
 *   otherModules?: string[] }[]} scopes a scope is a folder whose sub-folders are modules; each module names
 *   the sibling modules it may import, besides the scope's shared modules (which every module may
 *   import); `otherModules` is what a folder not named in `modules` may import (else it fails lint)
 * @param {{ root: string, except?: string, why: string }[]} sealed folders that no relative import leaves
 *   (but for `except`, a folder given from the repository root)
 */
export function moduleBoundaries(base, scopes, sealed) {
  const entries = (dir) => readdirSync(join(base, dir), { withFileTypes: true });
  const subdirs = (dir) =>
    entries(dir)
      .filter((e) => e.isDirectory() && e.name !== 'generated')
      .map((e) => e.name);

  /** The restrictions of the files directly in `dir` (a `/`-separated path below a sealed folder). */
  function restrictions(dir) {
    const patterns = [];
    const unlisted = [];
    const seal = sealed.find(({ root }) => dir === root || dir.startsWith(`${root}/`));
    const depth = (root) => (dir === root ? 0 : dir.slice(root.length + 1).split('/').length);
    // Leaving the sealed folder, then (where it has one) not landing in its exception: from the
    // repository root, that is as many levels up again as the sealed folder is deep.
    const rootward = seal.root.split('/').length - 1;
    const except = seal.except ? `(?!(\\.\\./){${rootward}}${escape(seal.except)}/)` : '';
    patterns.push({
      regex: `${up(depth(seal.root) + 1)}${except}`,
      message: `Code in ${seal.root} imports nothing outside it by a relative path${seal.except ? ` but ${seal.except}` : ''}: ${seal.why} (docs/architecture.md, "Modules"; eslint.config.mjs).`,
    });
    for (const { root, composition, shared = [], modules, otherModules } of scopes) {
      if (!dir.startsWith(`${root}/`)) {
        continue;
      }
      const module = dir.slice(root.length + 1).split('/')[0];
      const own = modules[module] ?? otherModules;
      if (!own) {
        unlisted.push(
          `${root}/${module} is not in the module map of eslint.config.mjs: add it with the modules it may import, and to docs/architecture.md ("Modules").`,
        );
        continue;
      }
      // A shared module is one every module may import: it imports none itself.
      const allowed = shared.includes(module) ? [] : [...own, ...shared];
      const denied = subdirs(root).filter((name) => name !== module && !allowed.includes(name));
      const levels = depth(root);
      const rule = `may import ${allowed.length ? `only ${allowed.join(', ')}` : 'none'} of the other modules of ${root}`;
      if (denied.length) {
        patterns.push({
          regex: `${up(levels)}(${denied.map(escape).join('|')})(/|$)`,
          message: `${root}/${module} ${rule} (docs/architecture.md, "Modules"; eslint.config.mjs).`,
        });
      }
      patterns.push({
        regex: `${up(levels)}(${composition.map(escape).join('|')})$`,
        message: `Nothing imports ${composition.join(', ')} of ${root}: the files that assemble its modules.`,
      });
    }
    return {
      'no-restricted-imports': ['error', { patterns }],
      // A folder missing from the map fails on every file in it, with the message that says what to do.
      ...(unlisted.length
        ? { 'no-restricted-syntax': ['error', ...unlisted.map((message) => ({ selector: 'Program', message }))] }
        : {}),
    };
  }

  const configs = [];
  const visit = (dir) => {
    if (entries(dir).some((e) => e.isFile() && e.name.endsWith('.ts'))) {
      configs.push({ files: [`${dir}/*.ts`], rules: restrictions(dir) });
    }
    for (const name of subdirs(dir)) {
      visit(`${dir}/${name}`);
    }
  };
  sealed.forEach(({ root }) => visit(root));
  return configs;
}
