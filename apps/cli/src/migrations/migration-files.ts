import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';

/** The one provider this runner applies migrations for (it speaks to Postgres through pg). */
export const PROVIDER = 'postgresql';

/** One folder of `prisma/migrations`: its name, its SQL, and the checksum Prisma records for it. */
export interface MigrationFile {
  name: string;
  sql: string;
  /** SHA-256 of migration.sql, hex: what `prisma migrate deploy` writes in `_prisma_migrations.checksum`. */
  checksum: string;
}

/**
 * The migrations of `dir` in Prisma's layout (`<timestamp>_<name>/migration.sql`), in name order, after
 * checking `migration_lock.toml`: Prisma refuses a history written for another provider, and so does this.
 */
export async function readMigrations(dir: string): Promise<MigrationFile[]> {
  await checkLock(dir);
  const entries = await readdir(dir, { withFileTypes: true });
  const names = entries
    .filter((e) => e.isDirectory())
    .map((e) => e.name)
    .sort();
  return Promise.all(
    names.map(async (name) => {
      const sql = await readFile(join(dir, name, 'migration.sql'), 'utf8');
      return { name, sql, checksum: createHash('sha256').update(sql).digest('hex') };
    }),
  );
}

/** The provider `migration_lock.toml` names (`provider = "postgresql"`), or null when it names none. */
export function lockProvider(toml: string): string | null {
  const match = /^\s*provider\s*=\s*"([^"]*)"\s*$/m.exec(toml);
  return match ? match[1] : null;
}

async function checkLock(dir: string): Promise<void> {
  const path = join(dir, 'migration_lock.toml');
  let toml: string;
  try {
    toml = await readFile(path, 'utf8');
  } catch (error) {
    if ((error as { code?: string }).code === 'ENOENT') {
      throw new Error(`${path} is missing: it records which database the migrations were written for`);
    }
    throw error;
  }
  const provider = lockProvider(toml);
  if (provider !== PROVIDER) {
    throw new Error(
      `${path} says provider ${provider === null ? '(none)' : `"${provider}"`}, but these migrations are applied to ` +
        `${PROVIDER}: the migration history was written for another database`,
    );
  }
}
