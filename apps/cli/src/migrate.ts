import { runCli } from './cli';

/**
 * `npm run db:migrate` (and the compose file's `migrate` service): `switchyard migrate`, with any
 * arguments given (`resolve --rolled-back <migration>`, `--dir <path>`).
 */
runCli([process.argv[0], 'switchyard', 'migrate', ...process.argv.slice(2)], {
  stdout: process.stdout,
  stderr: process.stderr,
  env: process.env,
}).then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`db:migrate failed: ${String(error)}\n`);
    process.exit(1);
  },
);
