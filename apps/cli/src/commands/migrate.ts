import type { Command } from 'commander';
import { loadConfig } from '@app/common/config/config';
import { projectPath } from '@app/common/paths/project-root';
import type { CliIo } from '../runner';
import { migrate, resolve } from '../migrations/migrator';

/** Applies the pending migrations of `dir` and says what it did (the lines `npm run db:migrate` prints). */
export async function runMigrations(databaseUrl: string, dir: string, io: Pick<CliIo, 'stdout' | 'stderr'>) {
  const result = await migrate(databaseUrl, dir);
  const name = decodeURIComponent(new URL(databaseUrl).pathname.slice(1));
  if (result.createdDatabase) {
    io.stdout.write(`created database ${name}\n`);
  }
  io.stdout.write(
    result.applied.length > 0
      ? `applied ${result.applied.length} migration(s): ${result.applied.join(', ')}\n`
      : `database ${name} is up to date (${result.alreadyApplied.length} migration(s))\n`,
  );
  if (result.unknown.length > 0) {
    // As `prisma migrate status` reports them; not an error (a newer release may have applied them).
    io.stderr.write(`warning: applied to database ${name} but not found in ${dir}: ${result.unknown.join(', ')}\n`);
  }
  return result;
}

/**
 * `migrate`: what `prisma migrate deploy` does, without Prisma's schema engine (it cannot be downloaded
 * here); `migrate resolve`: what `prisma migrate resolve` does. Both on DATABASE_URL.
 */
export function addMigrateCommand(program: Command, io: CliIo): void {
  const databaseUrl = () => loadConfig(io.env).DATABASE_URL;
  const migrateCommand = program
    .command('migrate')
    .description('create the database if missing and apply pending migrations (as prisma migrate deploy)')
    .option('--dir <path>', 'the migrations folder', projectPath('prisma/migrations'))
    .action(async (opts: { dir: string }) => {
      await runMigrations(databaseUrl(), opts.dir, io);
    });
  migrateCommand
    .command('resolve')
    .description('mark a failed migration rolled back, or a migration applied by hand (as prisma migrate resolve)')
    .option('--rolled-back <migration>', 'a failed migration: the next run applies it again')
    .option('--applied <migration>', 'a migration completed by hand: it is recorded as applied without running it')
    .action(async (opts: { rolledBack?: string; applied?: string }) => {
      // --dir is migrate's own option (commander gives it to the parent wherever it stands).
      const { dir } = migrateCommand.opts<{ dir: string }>();
      if (Boolean(opts.rolledBack) === Boolean(opts.applied)) {
        throw new Error('give one of --rolled-back <migration> or --applied <migration>');
      }
      const resolution = opts.rolledBack ? { rolledBack: opts.rolledBack } : { applied: opts.applied! };
      io.stdout.write(`${await resolve(databaseUrl(), dir, resolution)}\n`);
    });
}
