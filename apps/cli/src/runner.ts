import { loadConfig, redisTargetOf } from '@app/common/config/config';
import type { AdminService } from '@app/common/admin/admin.service';
import { CliServices } from './cli-services';
import { renderHuman } from './output';

/** Where a CLI run writes, and what it reads its configuration from. */
export interface CliIo {
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
  env: NodeJS.ProcessEnv;
}

/**
 * How a command's result is printed: a note on stderr after it (or made from the result: none when it
 * answers undefined), and its human form when not the result itself.
 */
export interface RunOptions {
  note?: string | ((result: unknown) => string | undefined);
  human?: (result: unknown) => unknown;
}

/** Runs a command's action on the services and prints its result (JSON or human-readable). */
export type Run = (action: (services: CliServices) => Promise<unknown>, opts?: RunOptions) => Promise<void>;

/** An operator command that is one call of an admin service. */
export type AdminCall = (action: (admin: AdminService) => Promise<unknown>, opts?: RunOptions) => Promise<void>;

/** `run` narrowed to one call of the admin services (libs/common/src/admin), as most commands are. */
export function adminCall(run: Run): AdminCall {
  return (action, opts) => run(async (s) => action(await s.admin()), opts);
}

/**
 * The runner of one command line: makes the services when a command's action runs (not before, so that
 * `--help` and usage errors load nothing), prints the result, and closes the services at the end.
 */
export class CommandRunner {
  private services: CliServices | undefined;
  /** Whether the command that ran asked for --json; errors are then printed as JSON too. */
  json = false;

  /** `wantsJson` reads the program's --json option when a command runs (commander has parsed it by then). */
  constructor(
    private readonly io: CliIo,
    private readonly wantsJson: () => boolean,
  ) {}

  readonly run: Run = async (action, opts = {}) => {
    this.json = this.wantsJson();
    const config = loadConfig(this.io.env);
    this.services = new CliServices(config.DATABASE_URL, redisTargetOf(config));
    const result = await action(this.services);
    // A JSON list is wrapped so that --json always prints one object.
    const out = Array.isArray(result) ? { object: 'list', data: result } : result;
    this.io.stdout.write(
      this.json ? `${JSON.stringify(out)}\n` : renderHuman(opts.human ? opts.human(result) : result),
    );
    const note = typeof opts.note === 'function' ? opts.note(result) : opts.note;
    if (note && !this.json) {
      this.io.stderr.write(`${note}\n`);
    }
  };

  async close(): Promise<void> {
    await this.services?.close();
  }
}
