import { createServer } from 'node:net';

/*
 * Imports nothing but Node's own modules: the CLI's embedded Postgres and Redis import this file
 * alone, since the test run's global setup loads them too and needs nothing else of libs/common.
 */

/** A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** Whether a listener could bind this port on 127.0.0.1 now (for a caller with its own policy of ports). */
export function canBind(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}
