import type { ChildProcess } from 'node:child_process';
import type { Readable } from 'node:stream';

/** How a ServiceProcess keeps and shows its child's output. */
export interface ServiceProcessOptions {
  /** Names it in errors, and prefixes its lines when echoed. */
  name?: string;
  /**
   * How much of each of stdout and stderr is kept, the last characters (default: all). A process that
   * runs for long (the bench's, the demo's) keeps a bounded tail, so that a chatty one cannot fill memory.
   */
  keepChars?: number;
  /** Also writes each line of its output, prefixed `[name] `, to this process's stdout and stderr (the demo). */
  echo?: boolean;
}

/** How often waitFor looks at the output again. */
const POLL_MS = 25;

/**
 * A child process of ours (an api, a dispatcher, a device agent, a server): its output kept for
 * assertions and failure reports, its exit as a promise, and a stop that escalates to SIGKILL.
 */
export class ServiceProcess {
  readonly name: string;
  readonly exited: Promise<number | null>;
  private out = '';
  private err = '';

  constructor(
    readonly child: ChildProcess,
    options: ServiceProcessOptions = {},
  ) {
    this.name = options.name ?? 'process';
    const keep = options.keepChars ?? Infinity;
    const collect = (stream: Readable | null, add: (text: string) => void, echo: NodeJS.WriteStream | null) => {
      let partial = '';
      stream?.on('data', (chunk: Buffer) => {
        const text = chunk.toString();
        add(text);
        if (echo) {
          // Whole lines only: a line split across chunks would be prefixed twice.
          const lines = (partial + text).split('\n');
          partial = lines.pop() ?? '';
          echo.write(lines.map((line) => `[${this.name}] ${line}\n`).join(''));
        }
      });
      stream?.on('end', () => {
        if (echo && partial) {
          echo.write(`[${this.name}] ${partial}\n`);
        }
      });
    };
    const tail = (text: string) => (text.length > keep ? text.slice(text.length - keep) : text);
    collect(child.stdout, (text) => (this.out = tail(this.out + text)), options.echo ? process.stdout : null);
    collect(child.stderr, (text) => (this.err = tail(this.err + text)), options.echo ? process.stderr : null);
    this.exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
  }

  get stdout(): string {
    return this.out;
  }

  get stderr(): string {
    return this.err;
  }

  /** What it wrote to stdout, then what it wrote to stderr (as far as kept). */
  get output(): string {
    return this.out + this.err;
  }

  get pid(): number {
    return this.child.pid ?? -1;
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Resolves once its output matches; rejects when it exits first or the time runs out, with its output. */
  async waitFor(pattern: RegExp, timeoutMs = 10_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!pattern.test(this.output)) {
      if (Date.now() > deadline) {
        throw new Error(`timed out waiting for ${String(pattern)}; output:\n${this.output}`);
      }
      if (this.child.exitCode !== null) {
        throw new Error(`process exited (${this.child.exitCode}) before ${String(pattern)}; output:\n${this.output}`);
      }
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
  }

  /** Sends `signal`, then SIGKILL after `graceMs`, and resolves with its exit code; at once if it has exited. */
  async terminate(signal: NodeJS.Signals, graceMs: number): Promise<number | null> {
    if (!this.running) {
      return this.child.exitCode;
    }
    this.child.kill(signal);
    const timer = setTimeout(() => this.child.kill('SIGKILL'), graceMs);
    const code = await this.exited;
    clearTimeout(timer);
    return code;
  }
}
