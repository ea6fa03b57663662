import { spawn, spawnSync } from 'node:child_process';
import { readyServer } from './server-process';
import type { EmbeddedService } from './embedded-service';
// Not the @app/common index, which loads all of libs/common: the test run's global setup loads this file.
import { freePort } from '@app/common/lifecycle/free-port';

/** How long a redis-server may take to say it is ready. */
const START_TIMEOUT_MS = 15_000;

/** Whether this machine has a redis-server on its PATH. */
function hasRedisServer(): boolean {
  return spawnSync('redis-server', ['--version'], { stdio: 'ignore' }).status === 0;
}

/**
 * The machine's redis-server, on 127.0.0.1 at a free port, keeping nothing on disk, in a process group
 * of its own (a Ctrl-C in the terminal reaches the processes that use it, not it: see
 * startEmbeddedPostgres).
 */
async function startRedisServer(): Promise<EmbeddedService> {
  const port = await freePort();
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'];
  const child = spawn('redis-server', [...args, '--maxmemory-policy', 'noeviction'], {
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const stop = await readyServer(child, {
    name: 'redis-server',
    ready: /Ready to accept connections/,
    timeoutMs: START_TIMEOUT_MS,
    stopSignal: 'SIGTERM',
  });
  return {
    url: `redis://127.0.0.1:${port}`,
    description: `Redis (this machine's redis-server) on 127.0.0.1:${port}, nothing kept on disk`,
    stop,
  };
}

/**
 * A Redis server of this process's own: the machine's redis-server when it has one, else
 * redis-memory-server's, which downloads and builds Redis on its first use (it needs a compiler and
 * download.redis.io; its install-time download is switched off in package.json, so that installing
 * Switchyard never depends on it).
 */
export async function startEmbeddedRedis(): Promise<EmbeddedService> {
  if (hasRedisServer()) {
    return startRedisServer();
  }
  // Loaded only here: most machines never need it.
  const { RedisMemoryServer } = await import('redis-memory-server');
  const server = await RedisMemoryServer.create();
  const [host, port] = await Promise.all([server.getHost(), server.getPort()]);
  return {
    url: `redis://${host}:${port}`,
    description: `Redis (redis-memory-server) on ${host}:${port}, nothing kept on disk`,
    stop: async () => {
      await server.stop();
    },
  };
}
