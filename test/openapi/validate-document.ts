import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { projectPath } from '../../libs/common/src/paths/project-root';

/** The validator's command line: the package is ESM only, which Jest's CommonJS runtime cannot load in process. */
const VALIDATOR = projectPath('node_modules/@seriousme/openapi-schema-validator/bin/validate-api-cli.js');

/**
 * Validates an OpenAPI document with @seriousme/openapi-schema-validator (the official OpenAPI 3.0/3.1
 * JSON Schemas), run as its own process on a copy of the document.
 */
export async function validateOpenApiDocument(doc: unknown): Promise<{ valid: boolean; errors?: unknown }> {
  const dir = await mkdtemp(join(tmpdir(), 'switchyard-openapi-'));
  try {
    const file = join(dir, 'openapi.json');
    await writeFile(file, JSON.stringify(doc));
    const stdout = await new Promise<string>((resolve) => {
      execFile(process.execPath, [VALIDATOR, file], (_error, out) => resolve(out));
    });
    return JSON.parse(stdout) as { valid: boolean; errors?: unknown };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
