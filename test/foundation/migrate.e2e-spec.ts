import { createHash, randomBytes } from 'node:crypto';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'pg';
import { projectPath } from '@app/common';
import { DATABASE_URL, baseEnv, closeDb, http, startApi, startNode } from '../support/stack';
import type { Api, Proc } from '../support/stack';
import { RedisServer } from '../reliability/helpers';
import { adminAuth, stopApis } from './helpers';
import { expectStatus } from '../support/expect-status';

const MIGRATIONS = projectPath('prisma/migrations');

/** A URL on the test server for another database of the given name. */
function urlFor(database: string): string {
  const url = new URL(DATABASE_URL);
  url.pathname = `/${database}`;
  return url.toString();
}

async function withClient<T>(url: string, fn: (client: Client) => Promise<T>): Promise<T> {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

async function runMigrate(url: string, args: string[] = []): Promise<{ code: number | null; proc: Proc }> {
  const proc = startNode('apps/cli/src/migrate.js', args, baseEnv({ DATABASE_URL: url }));
  return { code: await proc.exited, proc };
}

/** The migration runner (`npm run db:migrate`) on a database that does not exist yet. */
describe('db:migrate', () => {
  const database = `switchyard_migrate_${randomBytes(4).toString('hex')}`;
  const url = urlFor(database);
  const folders = readdirSync(MIGRATIONS, { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .map((e) => e.name)
    .sort();
  /** An api on the new database, started before the database exists. */
  let api: Api;
  /**
   * Its Redis: one of its own, since every process on a Redis writes the task records it finds there
   * into its own database, and this api's is not the run's (it would refuse and drop their rows).
   */
  let redis: RedisServer;

  const migrations = () =>
    withClient(url, async (c) => {
      const res = await c.query<{ migration_name: string; checksum: string; finished_at: Date | null }>(
        'SELECT migration_name, checksum, finished_at FROM "_prisma_migrations" WHERE rolled_back_at IS NULL',
      );
      return res.rows;
    });

  beforeAll(async () => {
    expect({ ok: folders.length > 0, message: `no migrations in ${MIGRATIONS}` }).toEqual(
      expect.objectContaining({ ok: true }),
    );
    const exists = await withClient(urlFor('postgres'), (c) =>
      c.query('SELECT 1 FROM pg_database WHERE datname = $1', [database]),
    );
    expect({ rowCount: exists.rowCount, message: `${database} already exists` }).toEqual(
      expect.objectContaining({ rowCount: 0 }),
    );
    redis = await RedisServer.start();
    // Its database does not exist yet: alive, not ready.
    api = await startApi({ DATABASE_URL: url, REDIS_URL: redis.url }, undefined, { ready: false });
  });

  /** Copies of the project's migrations, to add to or break. */
  const scratch: string[] = [];
  function copyOfMigrations(): string {
    const dir = mkdtempSync(join(tmpdir(), 'switchyard-migrations-'));
    scratch.push(dir);
    cpSync(MIGRATIONS, dir, { recursive: true });
    return dir;
  }
  function addMigration(dir: string, name: string, sql: string): void {
    mkdirSync(join(dir, name), { recursive: true });
    writeFileSync(join(dir, name, 'migration.sql'), sql);
  }
  const rowsOf = (name: string) =>
    withClient(url, async (c) => {
      const res = await c.query<{
        finished_at: Date | null;
        rolled_back_at: Date | null;
        logs: string | null;
        applied_steps_count: number;
      }>(
        `SELECT finished_at, rolled_back_at, logs, applied_steps_count FROM "_prisma_migrations"
         WHERE migration_name = $1 ORDER BY started_at`,
        [name],
      );
      return res.rows;
    });
  const tableExists = (table: string) =>
    withClient(url, async (c) => (await c.query('SELECT to_regclass($1) AS t', [table])).rows[0].t !== null);

  afterAll(async () => {
    scratch.forEach((dir) => rmSync(dir, { recursive: true, force: true }));
    await stopApis(api);
    await redis?.stop();
    await closeDb();
    await withClient(urlFor('postgres'), (c) => c.query(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`));
  });

  test('before migrating, the api on the missing database is not ready', async () => {
    const res = await http('GET', `${api.url}/readyz`);
    expectStatus(res, 503);
    expect(res.body.checks.postgres).not.toBe('ok');
  });

  test('two runs at once both succeed and apply each migration exactly once', async () => {
    const runs = await Promise.all([runMigrate(url), runMigrate(url)]);
    for (const { code, proc } of runs) {
      expect({ code, message: `migrate exited ${code}:\n${proc.output}` }).toEqual(
        expect.objectContaining({ code: 0 }),
      );
    }
    const outputs = runs.map((r) => r.proc.stdout);
    expect({
      length: outputs.filter((o) => /created database/.test(o)).length,
      message: outputs.join('\n---\n'),
    }).toEqual(expect.objectContaining({ length: 1 }));
    expect({
      length: outputs.filter((o) => /applied \d+ migration/.test(o)).length,
      message: outputs.join('\n---\n'),
    }).toEqual(expect.objectContaining({ length: 1 }));
    expect({ length: outputs.filter((o) => /up to date/.test(o)).length, message: outputs.join('\n---\n') }).toEqual(
      expect.objectContaining({ length: 1 }),
    );

    const rows = await migrations();
    expect(rows.map((r) => r.migration_name).sort()).toEqual(folders);
    for (const row of rows) {
      expect({ ok: row.finished_at instanceof Date, message: `${row.migration_name} has no finished_at` }).toEqual(
        expect.objectContaining({ ok: true }),
      );
      // Prisma's bookkeeping: the checksum is the SHA-256 of migration.sql.
      const sql = readFileSync(join(MIGRATIONS, row.migration_name, 'migration.sql'));
      expect({ checksum: row.checksum, migration_name: row.migration_name }).toEqual(
        expect.objectContaining({ checksum: createHash('sha256').update(sql).digest('hex') }),
      );
    }
    const tables = await withClient(url, (c) =>
      c.query<{ table_name: string }>(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name",
      ),
    );
    const names = tables.rows.map((r) => r.table_name);
    for (const table of ['api_keys', 'devices', 'models', 'org_models', 'organizations', 'tasks']) {
      expect({ ok: names.includes(table), message: `table ${table} missing: ${names.join(', ')}` }).toEqual(
        expect.objectContaining({ ok: true }),
      );
    }
  });

  test('a third run says the database is up to date and changes nothing', async () => {
    const earlier = await migrations();
    const { code, proc } = await runMigrate(url);
    expect({ code, output: proc.output }).toEqual(expect.objectContaining({ code: 0 }));
    expect(proc.stdout).toMatch(/up to date/);
    expect(proc.stdout).not.toMatch(/created database|applied/);
    expect(await migrations()).toEqual(earlier);
  });

  test('the migrated database serves the api', async () => {
    const ready = await http('GET', `${api.url}/readyz`);
    expectStatus(ready, 200);
    const created = await http('POST', `${api.url}/admin/orgs`, { headers: adminAuth(), body: { name: 'first-org' } });
    expectStatus(created, 201);
    const rows = await withClient(url, (c) => c.query('SELECT name FROM organizations'));
    expect(rows.rows).toEqual([{ name: 'first-org' }]);
  });

  const BROKEN = '29990101000000_broken';

  test('a failed migration is recorded as failed (no finished_at, its error in logs) and its statements are undone', async () => {
    const dir = copyOfMigrations();
    addMigration(dir, BROKEN, 'CREATE TABLE broken_half (id int);\nSELECT 1 / 0;\n');
    const { code, proc } = await runMigrate(url, ['--dir', dir]);
    expect({ code, output: proc.output }).not.toEqual(expect.objectContaining({ code: 0 }));
    expect(proc.stderr).toMatch(/migration 29990101000000_broken failed: division by zero/);
    expect(proc.stderr).toMatch(/migrate resolve --rolled-back 29990101000000_broken/);
    expect(await rowsOf(BROKEN)).toEqual([
      {
        finished_at: null,
        rolled_back_at: null,
        applied_steps_count: 0,
        logs: expect.stringMatching(/Migration name: 29990101000000_broken[\s\S]*division by zero/),
      },
    ]);
    // Sent as one query, its statements ran in one transaction: the table it created is gone with it.
    expect(await tableExists('broken_half')).toBe(false);
  });

  test('a failed migration blocks the next run, fixed or not, with how to resolve it; resolving lets it apply', async () => {
    const dir = copyOfMigrations();
    addMigration(dir, BROKEN, 'CREATE TABLE broken_half (id int);\n');
    let { code, proc } = await runMigrate(url, ['--dir', dir]);
    expect({ code, output: proc.output }).not.toEqual(expect.objectContaining({ code: 0 }));
    expect(proc.stderr).toMatch(
      /migration 29990101000000_broken \(started [^)]+\) failed, and no later migration is applied/,
    );
    expect(proc.stderr).toMatch(/division by zero/);
    expect(proc.stderr).toMatch(/npm run cli -- migrate resolve --rolled-back 29990101000000_broken/);
    expect(proc.stderr).toMatch(/npx prisma migrate resolve --rolled-back 29990101000000_broken/);
    expect(await tableExists('broken_half')).toBe(false);

    ({ code, proc } = await runMigrate(url, ['resolve', '--rolled-back', BROKEN, '--dir', dir]));
    expect({ code, output: proc.output }).toEqual(expect.objectContaining({ code: 0 }));
    expect(proc.stdout).toMatch(/marked rolled back/);
    // Only a failed migration can be rolled back.
    ({ code, proc } = await runMigrate(url, ['resolve', '--rolled-back', BROKEN, '--dir', dir]));
    expect({ code, output: proc.output }).not.toEqual(expect.objectContaining({ code: 0 }));
    expect(proc.stderr).toMatch(/not recorded as failed/);

    ({ code, proc } = await runMigrate(url, ['--dir', dir]));
    expect({ code, output: proc.output }).toEqual(expect.objectContaining({ code: 0 }));
    expect(proc.stdout).toMatch(/applied 1 migration\(s\): 29990101000000_broken/);
    expect(await tableExists('broken_half')).toBe(true);
    // As Prisma keeps them: the failed attempt, rolled back, then the applied one.
    const rows = await rowsOf(BROKEN);
    expect(rows.map((r) => [r.finished_at !== null, r.rolled_back_at !== null, r.applied_steps_count])).toEqual([
      [false, true, 0],
      [true, false, 1],
    ]);
  });

  test('a migration applied here but missing from the folder is reported, and the run succeeds', async () => {
    const { code, proc } = await runMigrate(url);
    expect({ code, output: proc.output }).toEqual(expect.objectContaining({ code: 0 }));
    expect(proc.stdout).toMatch(/up to date/);
    expect(proc.stderr).toMatch(/warning: applied to database \S+ but not found in \S+: 29990101000000_broken/);
  });

  test('a migration history written for another provider is refused before anything is applied', async () => {
    const dir = copyOfMigrations();
    writeFileSync(join(dir, 'migration_lock.toml'), 'provider = "mysql"\n');
    addMigration(dir, '29990102000000_more', 'CREATE TABLE more_things (id int);\n');
    const { code, proc } = await runMigrate(url, ['--dir', dir]);
    expect({ code, output: proc.output }).not.toEqual(expect.objectContaining({ code: 0 }));
    expect(proc.stderr).toMatch(/migration_lock\.toml says provider "mysql"/);
    expect(await tableExists('more_things')).toBe(false);
    expect(await rowsOf('29990102000000_more')).toEqual([]);
  });

  test('resolve --applied records a migration completed by hand without running it', async () => {
    const dir = copyOfMigrations();
    addMigration(dir, '29990103000000_by_hand', 'CREATE TABLE by_hand (id int);\n');
    let { code, proc } = await runMigrate(url, ['resolve', '--applied', '29990103000000_by_hand', '--dir', dir]);
    expect({ code, output: proc.output }).toEqual(expect.objectContaining({ code: 0 }));
    expect(await tableExists('by_hand')).toBe(false);
    ({ code, proc } = await runMigrate(url, ['--dir', dir]));
    expect({ code, output: proc.output }).toEqual(expect.objectContaining({ code: 0 }));
    expect(proc.stdout).toMatch(/up to date/);
    ({ code, proc } = await runMigrate(url, ['resolve', '--applied', '29990103000000_by_hand', '--dir', dir]));
    expect({ code, output: proc.output }).not.toEqual(expect.objectContaining({ code: 0 }));
    expect(proc.stderr).toMatch(/already recorded as applied/);
  });
});
