import { readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';
import { projectRoot } from '../paths/project-root';
import { sourceFiles } from '../paths/source-files';

/**
 * Every Lua script of ours touches only the keys it is passed: Redis Cluster routes a script by its
 * KEYS, and a key the script builds for itself may live on another node (docs/architecture.md, "Redis
 * keys"). The check reads the scripts where they are written (the template literals of apps/ and libs/
 * that call redis.call) and refuses a call whose key argument is neither `KEYS[n]` nor a local that
 * holds one (`local t = KEYS[1]`, `for _, key in ipairs(KEYS)`, a table filled from KEYS).
 */

/** The Lua scripts of a source: its template literals that call redis.call, with `${…}` parts blanked. */
function scripts(name: string, text: string): string[] {
  const file = ts.createSourceFile(name, text, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node) => {
    if (ts.isNoSubstitutionTemplateLiteral(node) || ts.isTemplateExpression(node)) {
      const lua = ts.isTemplateExpression(node)
        ? node.head.text + node.templateSpans.map((span) => `_${span.literal.text}`).join('')
        : node.text;
      if (lua.includes('redis.call(')) {
        found.push(lua);
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return found;
}

/** Commands whose first argument is not a key. */
const KEYLESS = new Set(['TIME', 'PING', 'ECHO']);

/** The redis.call of a script whose key argument is not one it was passed, as `COMMAND arg`. */
export function foreignKeyCalls(lua: string): string[] {
  const fromKeys = new Set<string>();
  for (const [, local] of lua.matchAll(/local\s+(\w+)\s*=\s*KEYS\[\d+\]/g)) {
    fromKeys.add(local);
  }
  for (const [, local] of lua.matchAll(/for\s+\w+\s*,\s*(\w+)\s+in\s+ipairs\(KEYS\)/g)) {
    fromKeys.add(local);
  }
  // A table filled from KEYS (`wait[ARGV[i]] = KEYS[3 + i]`): a lookup in it is a passed key.
  const tablesOfKeys = new Set<string>();
  for (const [, table] of lua.matchAll(/(\w+)\[[^=\n]*\]\s*=\s*KEYS\[/g)) {
    tablesOfKeys.add(table);
  }
  const foreign: string[] = [];
  for (const [, command, arg] of lua.matchAll(/redis\.call\(\s*'(\w+)'\s*,\s*([^,)]+)/g)) {
    const key = arg.trim();
    const lookup = /^(\w+)\[[^\]]+\]$/.exec(key)?.[1];
    const passed =
      /^KEYS\[[^\]]+\]$/.test(key) || fromKeys.has(key) || (lookup !== undefined && tablesOfKeys.has(lookup));
    if (!KEYLESS.has(command.toUpperCase()) && !passed) {
      foreign.push(`${command} ${key}`);
    }
  }
  return foreign;
}

describe('Lua scripts touch only the keys they are passed', () => {
  const root = projectRoot();
  const all = [...sourceFiles(join(root, 'apps')), ...sourceFiles(join(root, 'libs'))].flatMap((path) =>
    scripts(relative(root, path), readFileSync(path, 'utf8')).map((lua) => ({ path: relative(root, path), lua })),
  );

  it('finds the scripts (the check reads something)', () => {
    expect(all.map((s) => s.path)).toEqual(
      expect.arrayContaining([
        'libs/common/src/tasks/task-transitions.lua.ts',
        'libs/common/src/queues/fair-share.ts',
        'apps/api/src/limits/limits.service.ts',
      ]),
    );
  });

  it('every redis.call names a key from KEYS', () => {
    const foreign = all.flatMap(({ path, lua }) => foreignKeyCalls(lua).map((call) => `${path}: ${call}`));
    expect(foreign).toEqual([]);
  });

  it('refuses a key built in the script, and a local that does not come from KEYS', () => {
    expect(foreignKeyCalls(`local hk = 'sy:held:' .. d\nredis.call('SADD', hk, id)`)).toEqual(['SADD hk']);
    expect(foreignKeyCalls(`redis.call('LLEN', 'sy:' .. line .. ':wait')`)).toEqual([`LLEN 'sy:' .. line .. ':wait'`]);
    expect(foreignKeyCalls(`local t = KEYS[1]\nredis.call('HGET', t, 'st')\nredis.call('TIME')`)).toEqual([]);
    expect(foreignKeyCalls(`local w = {}\nw[ARGV[2]] = KEYS[4]\nredis.call('LLEN', w[line])`)).toEqual([]);
    expect(foreignKeyCalls(`local w = {}\nredis.call('LLEN', w[line])`)).toEqual(['LLEN w[line]']);
  });
});
