import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from 'pg';
import { projectPath } from '@app/common';
import { DATABASE_URL, baseEnv, closeDb, http, startApi, startNode } from '../support/stack';
import type { Api, Proc } from '../support/stack';
import { adminAuth, stopApis } from './helpers';

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

async function runMigrate(url: string): Promise<{ code: number | null; proc: Proc }> {
  const proc = startNode('apps/cli/src/migrate.js', [], baseEnv({ DATABASE_URL: url }));
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

  const migrations = () =>
    withClient(url, async (c) => {
      const res = await c.query<{ migration_name: string; checksum: string; finished_at: Date | null }>(
        'SELECT migration_name, checksum, finished_at FROM "_prisma_migrations" WHERE rolled_back_at IS NULL',
      );
      return res.rows;
    });

  beforeAll(async () => {
    assert.ok(folders.length > 0, `no migrations in ${MIGRATIONS}`);
    const exists = await withClient(urlFor('postgres'), (c) =>
      c.query('SELECT 1 FROM pg_database WHERE datname = $1', [database]),
    );
    assert.equal(exists.rowCount, 0, `${database} already exists`);
    api = await startApi({ DATABASE_URL: url });
  });

  afterAll(async () => {
    await stopApis(api);
    await closeDb();
    await withClient(urlFor('postgres'), (c) => c.query(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`));
  });

  test('before migrating, the api on the missing database is not ready', async () => {
    const res = await http('GET', `${api.url}/readyz`);
    assert.equal(res.status, 503, res.text);
    assert.notEqual(res.body.checks.postgres, 'ok');
  });

  test('two runs at once both succeed and apply each migration exactly once', async () => {
    const runs = await Promise.all([runMigrate(url), runMigrate(url)]);
    for (const { code, proc } of runs) {
      assert.equal(code, 0, `migrate exited ${code}:\n${proc.output}`);
    }
    const outputs = runs.map((r) => r.proc.stdout);
    assert.equal(outputs.filter((o) => /created database/.test(o)).length, 1, outputs.join('\n---\n'));
    assert.equal(outputs.filter((o) => /applied \d+ migration/.test(o)).length, 1, outputs.join('\n---\n'));
    assert.equal(outputs.filter((o) => /up to date/.test(o)).length, 1, outputs.join('\n---\n'));

    const rows = await migrations();
    expect(rows.map((r) => r.migration_name).sort()).toEqual(folders);
    for (const row of rows) {
      assert.ok(row.finished_at instanceof Date, `${row.migration_name} has no finished_at`);
      // Prisma's bookkeeping: the checksum is the SHA-256 of migration.sql.
      const sql = readFileSync(join(MIGRATIONS, row.migration_name, 'migration.sql'));
      assert.equal(row.checksum, createHash('sha256').update(sql).digest('hex'), row.migration_name);
    }
    const tables = await withClient(url, (c) =>
      c.query<{ table_name: string }>(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name",
      ),
    );
    const names = tables.rows.map((r) => r.table_name);
    for (const table of ['api_keys', 'devices', 'models', 'org_models', 'organizations', 'tasks']) {
      assert.ok(names.includes(table), `table ${table} missing: ${names.join(', ')}`);
    }
  });

  test('a third run says the database is up to date and changes nothing', async () => {
    const earlier = await migrations();
    const { code, proc } = await runMigrate(url);
    assert.equal(code, 0, proc.output);
    assert.match(proc.stdout, /up to date/);
    assert.doesNotMatch(proc.stdout, /created database|applied/);
    expect(await migrations()).toEqual(earlier);
  });

  test('the migrated database serves the api', async () => {
    const ready = await http('GET', `${api.url}/readyz`);
    assert.equal(ready.status, 200, ready.text);
    const created = await http('POST', `${api.url}/admin/orgs`, { headers: adminAuth(), body: { name: 'first-org' } });
    assert.equal(created.status, 201, created.text);
    const rows = await withClient(url, (c) => c.query('SELECT name FROM organizations'));
    expect(rows.rows).toEqual([{ name: 'first-org' }]);
  });
});
