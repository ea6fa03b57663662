#!/usr/bin/env node
import { runCli } from './cli';

/**
 * The `switchyard` binary (package.json `bin`, over the build in dist/): one command line, then exit
 * with its code. It loads only what its command needs (see CliServices).
 */
runCli(process.argv, { stdout: process.stdout, stderr: process.stderr, env: process.env }).then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`error: ${String(error)}\n`);
    process.exit(1);
  },
);
