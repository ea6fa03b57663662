import { randomUUID } from 'node:crypto';
import { Client } from 'pg';
import { readMigrations } from './migration-files';
import type { MigrationFile } from './migration-files';

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
  /** Recorded as applied in the database, but with no folder here (a newer release, or a deleted folder). */
  unknown: string[];
}

/** How `resolve` marks a migration, as `prisma migrate resolve --rolled-back | --applied` does. */
export type Resolution = { rolledBack: string } | { applied: string };

/** The command that resolves a failed migration: this CLI's, and Prisma's where its engine runs. */
export function resolveHint(flag: '--rolled-back' | '--applied', name: string): string {
  return `npm run cli -- migrate resolve ${flag} ${name} (or: npx prisma migrate resolve ${flag} ${name})`;
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

interface AppliedRow {
  id: string;
  migration_name: string;
  checksum: string;
  finished_at: Date | null;
  started_at: Date;
  logs: string | null;
}

/** Runs `fn` on the database under Prisma's advisory lock, with Prisma's table in place. */
async function locked<T>(databaseUrl: string, fn: (client: Client, rows: AppliedRow[]) => Promise<T>): Promise<T> {
  const client = new Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    await client.query('SELECT pg_advisory_lock($1)', [PRISMA_ADVISORY_LOCK]);
    await client.query(CREATE_MIGRATIONS_TABLE);
    const { rows } = await client.query<AppliedRow>(
      `SELECT id, migration_name, checksum, finished_at, started_at, logs FROM "_prisma_migrations"
       WHERE rolled_back_at IS NULL ORDER BY started_at`,
    );
    return await fn(client, rows);
  } finally {
    // Cleanup: the session's end releases the lock anyway, and a failure here must not hide the one above.
    await client.query('SELECT pg_advisory_unlock($1)', [PRISMA_ADVISORY_LOCK]).catch(() => undefined);
    await client.end();
  }
}

/** Why nothing is applied while a migration is recorded as failed, and how to get past it. */
function blocked(row: AppliedRow): Error {
  const logs = row.logs ? `\n${row.logs.trim()}\n` : '\n';
  return new Error(
    `migration ${row.migration_name} (started ${row.started_at.toISOString()}) failed, and no later migration is ` +
      `applied until it is resolved.${logs}` +
      `Its statements ran in one transaction, so normally nothing of it is left; once the database is as it was ` +
      `before it (and its migration.sql is fixed), mark it rolled back and migrate again:\n` +
      `  ${resolveHint('--rolled-back', row.migration_name)}\n` +
      `If you completed it by hand instead, mark it applied:\n  ${resolveHint('--applied', row.migration_name)}`,
  );
}

/**
 * Applies the migrations of `dir` that the database has not recorded, in name order, keeping Prisma's
 * bookkeeping as `prisma migrate deploy` does: a row is written when a migration starts, and finished
 * when it succeeds; a failed one keeps its row with no finished_at and the error in `logs`, and blocks
 * every later run until it is resolved (see `resolve`). Each migration.sql is sent as one simple query,
 * which Postgres runs in one implicit transaction, as Prisma's engine does. Under Prisma's advisory lock,
 * so running it twice, or from two processes at once, applies each migration once.
 */
export async function migrate(databaseUrl: string, dir: string): Promise<MigrationResult> {
  // The files first: a history for another provider is refused before anything is created.
  const migrations = await readMigrations(dir);
  const createdDatabase = await ensureDatabase(databaseUrl);
  return locked(databaseUrl, async (client, rows) => {
    const failed = rows.find((r) => r.finished_at === null);
    if (failed) {
      throw blocked(failed);
    }
    const local = new Set(migrations.map((m) => m.name));
    const unknown = [...new Set(rows.map((r) => r.migration_name).filter((name) => !local.has(name)))];
    const done = new Map(rows.map((r) => [r.migration_name, r.checksum]));
    const applied: string[] = [];
    const alreadyApplied: string[] = [];
    for (const migration of migrations) {
      const checksum = done.get(migration.name);
      if (checksum === undefined) {
        await apply(client, migration);
        applied.push(migration.name);
      } else if (checksum !== migration.checksum) {
        throw new Error(`migration ${migration.name} was changed after it was applied (checksum differs)`);
      } else {
        alreadyApplied.push(migration.name);
      }
    }
    return { createdDatabase, applied, alreadyApplied, unknown };
  });
}

async function apply(client: Client, migration: MigrationFile): Promise<void> {
  const id = randomUUID();
  await client.query(
    `INSERT INTO "_prisma_migrations" (id, checksum, migration_name, started_at, applied_steps_count)
     VALUES ($1, $2, $3, now(), 0)`,
    [id, migration.checksum, migration.name],
  );
  try {
    // No parameters: pg sends it as one simple query, so its statements commit or fail together.
    await client.query(migration.sql);
  } catch (error) {
    const code = (error as { code?: string }).code ?? 'unknown';
    const logs = `Migration name: ${migration.name}\n\nDatabase error code: ${code}\n\nDatabase error:\n${(error as Error).message}`;
    await client.query('UPDATE "_prisma_migrations" SET logs = $2 WHERE id = $1', [id, logs]);
    throw new Error(
      `migration ${migration.name} failed: ${(error as Error).message}\n` +
        `It is recorded as failed; fix it, then mark it rolled back before migrating again:\n` +
        `  ${resolveHint('--rolled-back', migration.name)}`,
    );
  }
  await client.query('UPDATE "_prisma_migrations" SET finished_at = now(), applied_steps_count = 1 WHERE id = $1', [
    id,
  ]);
}

/**
 * Marks a failed migration rolled back (it is applied again by the next run), or a migration applied
 * without running it (it was completed by hand), as `prisma migrate resolve` does.
 */
export async function resolve(databaseUrl: string, dir: string, resolution: Resolution): Promise<string> {
  const migrations = await readMigrations(dir);
  return locked(databaseUrl, async (client, rows) => {
    if ('rolledBack' in resolution) {
      const name = resolution.rolledBack;
      const { rowCount } = await client.query(
        `UPDATE "_prisma_migrations" SET rolled_back_at = now()
         WHERE migration_name = $1 AND finished_at IS NULL AND rolled_back_at IS NULL`,
        [name],
      );
      if (!rowCount) {
        throw new Error(`migration ${name} is not recorded as failed: only a failed migration can be rolled back`);
      }
      return `migration ${name} marked rolled back: the next run applies it again`;
    }
    const name = resolution.applied;
    const migration = migrations.find((m) => m.name === name);
    if (!migration) {
      throw new Error(`migration ${name} is not in ${dir}`);
    }
    if (rows.some((r) => r.migration_name === name && r.finished_at !== null)) {
      throw new Error(`migration ${name} is already recorded as applied`);
    }
    await client.query('BEGIN');
    try {
      await client.query(
        `UPDATE "_prisma_migrations" SET rolled_back_at = now()
         WHERE migration_name = $1 AND finished_at IS NULL AND rolled_back_at IS NULL`,
        [name],
      );
      await client.query(
        `INSERT INTO "_prisma_migrations" (id, checksum, migration_name, started_at, finished_at, applied_steps_count)
         VALUES ($1, $2, $3, now(), now(), 0)`,
        [randomUUID(), migration.checksum, name],
      );
      await client.query('COMMIT');
    } catch (error) {
      // Rollback after an error: the error above is the one to report.
      await client.query('ROLLBACK').catch(() => undefined);
      throw error;
    }
    return `migration ${name} marked applied`;
  });
}
