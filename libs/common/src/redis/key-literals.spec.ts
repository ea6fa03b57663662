import { readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';
import { projectRoot } from '../paths/project-root';
import { sourceFiles } from '../paths/source-files';

/** The one file that may spell key names. */
const KEYS_FILE = 'libs/common/src/redis/keys.ts';

/** A key name (`sy:…`, in any string or template, Lua scripts included) or BullMQ's prefix (`sy`) alone. */
const KEY_NAME = /\bsy:/;

/** The string and template literals of a source that spell a key name, as `name:line: text`. */
function keyLiterals(name: string, text: string): string[] {
  const file = ts.createSourceFile(name, text, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node) => {
    if (
      ts.isStringLiteral(node) ||
      ts.isNoSubstitutionTemplateLiteral(node) ||
      ts.isTemplateHead(node) ||
      ts.isTemplateMiddle(node) ||
      ts.isTemplateTail(node)
    ) {
      if (KEY_NAME.test(node.text) || node.text === 'sy') {
        const { line } = file.getLineAndCharacterOfPosition(node.getStart());
        found.push(`${name}:${line + 1}: ${node.text.slice(0, 80)}`);
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return found;
}

describe('Redis key names', () => {
  it(`are spelled only in ${KEYS_FILE}: everything else builds them from keys`, () => {
    const root = projectRoot();
    const files = [...sourceFiles(join(root, 'apps')), ...sourceFiles(join(root, 'libs'))].filter(
      (path) => relative(root, path) !== KEYS_FILE,
    );
    expect(files.length).toBeGreaterThan(100);
    expect(files.flatMap((path) => keyLiterals(relative(root, path), readFileSync(path, 'utf8')))).toEqual([]);
  });

  it('are found in strings, templates and the Lua inside them; comments may name keys', () => {
    const source = [
      '// Comments name keys: `sy:t:<id>`.',
      "const a = 'sy:t:' + id;",
      'const b = `sy:held:${d}`;',
      "const lua = `local svc = 'sy:svc:' .. q`;",
      "const prefix = 'sy';",
      "const c = 'busy: not a key', d = 'sy_admin_session';",
    ].join('\n');
    expect(keyLiterals('probe.ts', source)).toEqual([
      'probe.ts:2: sy:t:',
      'probe.ts:3: sy:held:',
      "probe.ts:4: local svc = 'sy:svc:' .. q",
      'probe.ts:5: sy',
    ]);
  });
});
