import { createHash, randomUUID } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Client } from 'pg';

/**
 * The advisory lock key `prisma migrate deploy` takes, so that this runner and Prisma's never
 * apply migrations at the same time.
 */
const PRISMA_ADVISORY_LOCK = 72707369;

/** Prisma's bookkeeping table, created exactly as Prisma's schema engine creates it. */
const CREATE_MIGRATIONS_TABLE = `
CREATE TABLE IF NOT EXISTS "_prisma_migrations" (
    "id"                    VARCHAR(36) PRIMARY KEY NOT NULL,
    "checksum"              VARCHAR(64) NOT NULL,
    "finished_at"           TIMESTAMPTZ,
    "migration_name"        VARCHAR(255) NOT NULL,
    "logs"                  TEXT,
    "rolled_back_at"        TIMESTAMPTZ,
    "started_at"            TIMESTAMPTZ NOT NULL DEFAULT now(),
    "applied_steps_count"   INTEGER NOT NULL DEFAULT 0
)`;

export interface MigrationResult {
  createdDatabase: boolean;
  applied: string[];
  alreadyApplied: string[];
}

interface MigrationFile {
  name: string;
  sql: string;
  checksum: string;
}

async function readMigrations(dir: string): Promise<MigrationFile[]> {
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

/** Creates the database named in the URL when it does not exist (safe when two processes race). */
export async function ensureDatabase(databaseUrl: string): Promise<boolean> {
  const target = new URL(databaseUrl);
  const dbName = decodeURIComponent(target.pathname.slice(1));
  if (!dbName) {
    throw new Error('DATABASE_URL names no database');
  }
  const admin = new URL(databaseUrl);
  admin.pathname = '/postgres';
  const client = new Client({ connectionString: admin.toString() });
  await client.connect();
  try {
    const found = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [dbName]);
    if (found.rowCount) {
      return false;
    }
    try {
      await client.query(`CREATE DATABASE "${dbName.replaceAll('"', '""')}"`);
      return true;
    } catch (error) {
      // 42P04 duplicate_database, 23505 unique_violation: another process created it first.
      const code = (error as { code?: string }).code;
      if (code === '42P04' || code === '23505') {
        return false;
      }
      throw error;
    }
  } finally {
    await client.end();
  }
}

/**
 * Applies the migrations in `dir` (Prisma's folder layout) that the database has not recorded,
 * in name order, each in its own transaction together with its `_prisma_migrations` row, under
 * Prisma's advisory lock. Running it twice, or from two processes at once, applies each migration once.
 */
export async function migrate(databaseUrl: string, dir: string): Promise<MigrationResult> {
  const createdDatabase = await ensureDatabase(databaseUrl);
  const migrations = await readMigrations(dir);
  const client = new Client({ connectionString: databaseUrl });
  await client.connect();
  const applied: string[] = [];
  const alreadyApplied: string[] = [];
  try {
    await client.query('SELECT pg_advisory_lock($1)', [PRISMA_ADVISORY_LOCK]);
    await client.query(CREATE_MIGRATIONS_TABLE);
    const rows = await client.query<{ migration_name: string; checksum: string; finished_at: Date | null }>(
      'SELECT migration_name, checksum, finished_at FROM "_prisma_migrations" WHERE rolled_back_at IS NULL',
    );
    const failed = rows.rows.filter((r) => r.finished_at === null);
    if (failed.length > 0) {
      throw new Error(
        `migration ${failed[0].migration_name} is recorded as started but not finished; resolve it before migrating`,
      );
    }
    const done = new Map(rows.rows.map((r) => [r.migration_name, r.checksum]));
    for (const migration of migrations) {
      const checksum = done.get(migration.name);
      if (checksum !== undefined) {
        if (checksum !== migration.checksum) {
          throw new Error(`migration ${migration.name} was changed after it was applied (checksum differs)`);
        }
        alreadyApplied.push(migration.name);
        continue;
      }
      await client.query('BEGIN');
      try {
        const startedAt = new Date();
        await client.query(migration.sql);
        await client.query(
          `INSERT INTO "_prisma_migrations" (id, checksum, finished_at, migration_name, started_at, applied_steps_count)
           VALUES ($1, $2, now(), $3, $4, 1)`,
          [randomUUID(), migration.checksum, migration.name, startedAt],
        );
        await client.query('COMMIT');
      } catch (error) {
        await client.query('ROLLBACK');
        throw new Error(`migration ${migration.name} failed: ${(error as Error).message}`);
      }
      applied.push(migration.name);
    }
  } finally {
    await client.query('SELECT pg_advisory_unlock($1)', [PRISMA_ADVISORY_LOCK]).catch(() => undefined);
    await client.end();
  }
  return { createdDatabase, applied, alreadyApplied };
}
