import { spawn } from 'node:child_process';
import type { ChildProcess, StdioOptions } from 'node:child_process';
import { join } from 'node:path';
import { nodeFlagsFor } from './node-flags';
import type { ServiceProcess } from './service-process';

/*
 * How the tests, the bench and the demo start the project's processes: one node command line per entry
 * point (with its own Node flags), and one wait for a process to answer over HTTP. Each of them keeps
 * its own policy on top (the tests' port ranges, the bench's profiling flags, the demo's echoed output).
 */

/** Where a project entry point is run from. */
export interface NodeLaunch {
  /** The build's root: dist/, or a test run's transpiled copy of apps/ and libs/. */
  build: string;
  /** Node flags beyond the entry point's own (the bench's profiling and GC hooks). */
  flags?: readonly string[];
}

/**
 * Node's arguments for one of the project's entry points (`apps/api/src/main.js`, relative to the
 * build): the flags it must run with (nodeFlagsFor: the dispatcher's heap flags), the extra flags,
 * the script, its arguments.
 */
export function nodeCommand(script: string, args: readonly string[], launch: NodeLaunch): string[] {
  return [...nodeFlagsFor(script), ...(launch.flags ?? []), join(launch.build, script), ...args];
}

/** Starts one of the project's entry points with this Node, its output piped (see ServiceProcess). */
export function spawnNode(
  script: string,
  args: readonly string[],
  launch: NodeLaunch & { env: NodeJS.ProcessEnv; stdio?: StdioOptions },
): ChildProcess {
  return spawn(process.execPath, nodeCommand(script, args, launch), {
    env: launch.env,
    stdio: launch.stdio ?? ['ignore', 'pipe', 'pipe'],
  });
}

/** How long waitForHttp waits. */
export interface HttpWait {
  timeoutMs: number;
  /** The process that serves the URL: its exit ends the wait early, and its kept output goes into the error. */
  process?: ServiceProcess;
}

/** Between two attempts. */
const ATTEMPT_INTERVAL_MS = 50;
/** One attempt: a server that accepts but does not answer is not up, and must not hold the wait past its time. */
const ATTEMPT_TIMEOUT_MS = 2_000;

/** Resolves once `GET url` answers 2xx (a health URL); rejects when the process exits first or the time runs out. */
export async function waitForHttp(url: string, wait: HttpWait): Promise<void> {
  const deadline = Date.now() + wait.timeoutMs;
  const output = () => (wait.process?.output ? `; output:\n${wait.process.output}` : '');
  for (;;) {
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(ATTEMPT_TIMEOUT_MS) });
      // Read, so that the connection is released now rather than when the response is collected.
      await res.arrayBuffer();
      if (res.ok) {
        return;
      }
    } catch {
      // not listening yet
    }
    if (wait.process && !wait.process.running) {
      const { name, child } = wait.process;
      throw new Error(`${name} exited (code ${child.exitCode ?? child.signalCode}) before ${url} answered${output()}`);
    }
    if (Date.now() > deadline) {
      throw new Error(`${url} did not come up in ${wait.timeoutMs} ms${output()}`);
    }
    await new Promise((resolve) => setTimeout(resolve, ATTEMPT_INTERVAL_MS));
  }
}
