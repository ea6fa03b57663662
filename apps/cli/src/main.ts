import { runCli } from './cli';

/** The `switchyard` binary: one command line, then exit with its code. */
runCli(process.argv, { stdout: process.stdout, stderr: process.stderr, env: process.env }).then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`error: ${String(error)}\n`);
    process.exit(1);
  },
);
