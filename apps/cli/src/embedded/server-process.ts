import type { ChildProcess } from 'node:child_process';
import { ServiceProcess } from '@app/common/lifecycle/service-process';

/** The longest a stop waits for a server to end before it is killed. */
const STOP_TIMEOUT_MS = 15_000;

/**
 * A server child (Postgres, redis-server) once it says it is ready: its output kept (a bounded tail,
 * for the error of a server that does not start), and a stop by `signal` that escalates to SIGKILL.
 * Resolves with the stop; rejects with the output when it exits first or the time runs out.
 */
export async function readyServer(
  child: ChildProcess,
  opts: { name: string; ready: RegExp; timeoutMs: number; stopSignal: NodeJS.Signals },
): Promise<() => Promise<void>> {
  const server = new ServiceProcess(child, { name: opts.name, keepChars: 64 * 1024 });
  try {
    await server.waitFor(opts.ready, opts.timeoutMs);
  } catch (error) {
    await server.terminate('SIGKILL', 0);
    throw new Error(`${opts.name} did not start: ${(error as Error).message}`);
  }
  return async () => {
    await server.terminate(opts.stopSignal, STOP_TIMEOUT_MS);
  };
}
