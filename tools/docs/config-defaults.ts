import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { evaluate, firstSentence } from './source-constants';

/** A setting of the environment with a numeric default, as the docs list it. */
export interface ConfigDefault {
  name: string;
  value: number;
  about: string;
}

/** The numeric default of a setting's schema: `.default(n)`, or the argument of a helper such as `positiveMs(n)`. */
function numericDefault(node: ts.Node): number | null {
  let found: number | null = null;
  const visit = (child: ts.Node): void => {
    if (found !== null) {
      return;
    }
    if (ts.isCallExpression(child) && child.arguments.length === 1) {
      const callee = child.expression;
      const named = ts.isIdentifier(callee)
        ? callee.text
        : ts.isPropertyAccessExpression(callee)
          ? callee.name.text
          : '';
      const value = evaluate(child.arguments[0], new Map());
      if ((named === 'default' || /^(positiveMs|port)$/.test(named)) && value !== null) {
        found = value;
        return;
      }
    }
    ts.forEachChild(child, visit);
  };
  visit(node);
  return found;
}

/**
 * The settings of libs/common/src/config/config.ts's schema that have a numeric default, with their doc
 * comments, in the schema's order: the docs' table of them is made from the schema itself.
 */
export function configDefaults(root: string): ConfigDefault[] {
  const file = join(root, 'libs/common/src/config/config.ts');
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.ES2022, true);
  const found: ConfigDefault[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isVariableDeclaration(node) && ts.isIdentifier(node.name) && node.name.text === 'configSchema') {
      const object = findObject(node);
      for (const property of object?.properties ?? []) {
        if (ts.isPropertyAssignment(property) && ts.isIdentifier(property.name)) {
          const value = numericDefault(property.initializer);
          if (value !== null) {
            found.push({ name: property.name.text, value, about: firstSentence(property, source) });
          }
        }
      }
      return;
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

/** The object literal given to `z.object(…)` in the schema's declaration. */
function findObject(node: ts.Node): ts.ObjectLiteralExpression | null {
  let found: ts.ObjectLiteralExpression | null = null;
  const visit = (child: ts.Node): void => {
    if (!found && ts.isObjectLiteralExpression(child)) {
      found = child;
      return;
    }
    ts.forEachChild(child, visit);
  };
  visit(node);
  return found;
}
