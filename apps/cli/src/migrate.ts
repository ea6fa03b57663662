import { loadConfigOrExit, migrate, projectPath } from '@app/common';

/** `npm run db:migrate`: creates the database if needed and applies pending migrations. */
async function main(): Promise<void> {
  const config = loadConfigOrExit();
  const dir = projectPath('prisma/migrations');
  const result = await migrate(config.DATABASE_URL, dir);
  const where = new URL(config.DATABASE_URL);
  if (result.createdDatabase) {
    process.stdout.write(`created database ${where.pathname.slice(1)}\n`);
  }
  process.stdout.write(
    result.applied.length > 0
      ? `applied ${result.applied.length} migration(s): ${result.applied.join(', ')}\n`
      : `database ${where.pathname.slice(1)} is up to date (${result.alreadyApplied.length} migration(s))\n`,
  );
}

main().catch((error: unknown) => {
  process.stderr.write(`db:migrate failed: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
