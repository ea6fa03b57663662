import type { ChildProcess } from 'node:child_process';

/** The longest a stop waits for a server to end before it is killed. */
const STOP_TIMEOUT_MS = 15_000;

/**
 * Resolves once the child's output (stdout or stderr) matches `ready`; rejects with its output when
 * it exits first or the time runs out. Its output is drained from then on (a full pipe would block it).
 */
export function waitForOutput(child: ChildProcess, ready: RegExp, timeoutMs: number, name: string): Promise<void> {
  let output = '';
  return new Promise<void>((resolve, reject) => {
    const done = (error?: Error) => {
      clearTimeout(timer);
      child.off('exit', exited);
      if (error) {
        child.kill('SIGKILL');
        reject(error);
      } else {
        resolve();
      }
    };
    const timer = setTimeout(() => done(new Error(`${name} did not start in ${timeoutMs} ms:\n${output}`)), timeoutMs);
    const exited = (code: number | null) => done(new Error(`${name} exited (code ${code}):\n${output}`));
    child.once('exit', exited);
    for (const stream of [child.stdout, child.stderr]) {
      stream?.on('data', (chunk: Buffer) => {
        if (output.length < 64 * 1024) {
          output += chunk.toString();
        }
        if (ready.test(output)) {
          done();
        }
      });
    }
  });
}

/** Sends the child `signal` and waits for it to end (SIGKILL after STOP_TIMEOUT_MS); at once if it has. */
export function stopChild(child: ChildProcess, signal: NodeJS.Signals): Promise<void> {
  return new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) {
      resolve();
      return;
    }
    const timer = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    child.kill(signal);
  });
}
