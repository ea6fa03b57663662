import { Command, CommanderError } from 'commander';
import { ConfigError } from '@app/common/config/config';
import { AppError } from '@app/common/errors/app-error';
import { addAuditCommand } from './commands/audit';
import { addCanaryCommands } from './commands/canaries';
import { addDeviceCommands } from './commands/devices';
import { addKeyCommands } from './commands/keys';
import { addMigrateCommand } from './commands/migrate';
import { addModelCommands } from './commands/models';
import { addOrgCommands } from './commands/orgs';
import { addQueuesCommand } from './commands/queues';
import { addTaskCommands } from './commands/tasks';
import { addUsageCommand } from './commands/usage';
import { CommandRunner } from './runner';
import type { CliIo, Run } from './runner';

/**
 * `switchyard`: the operators' command line. Every command is one call of the admin services
 * (libs/common/src/admin) or the usage service, the same code the admin HTTP API runs; each resource's
 * commands are in commands/, in the order `--help` lists them.
 */
function buildProgram(io: CliIo, run: Run): Command {
  // Output settings first: subcommands copy them when they are created.
  const program = new Command('switchyard')
    .configureOutput({ writeOut: (text) => void io.stdout.write(text), writeErr: (text) => void io.stderr.write(text) })
    .description('Operate Switchyard: organizations, API keys, models, devices, tasks, usage and the audit log')
    .option('--json', 'print one JSON object instead of human-readable text')
    .showHelpAfterError()
    .exitOverride();
  addOrgCommands(program, run);
  addKeyCommands(program, run);
  addModelCommands(program, run);
  addCanaryCommands(program, run);
  addDeviceCommands(program, run);
  addTaskCommands(program, run);
  addQueuesCommand(program, run);
  addUsageCommand(program, run);
  addAuditCommand(program, run);
  addMigrateCommand(program, io);
  return program;
}

/**
 * Runs one command line (`argv` as process.argv has it: node, script, then the arguments) and returns
 * its exit code. The binary calls it with the process's streams; tests call it in process.
 */
export async function runCli(argv: string[], io: CliIo): Promise<number> {
  const runner = new CommandRunner(io, () => Boolean(program.opts<{ json?: boolean }>().json));
  const program = buildProgram(io, runner.run);
  let code = 0;
  try {
    await program.parseAsync(argv);
  } catch (error) {
    if (error instanceof CommanderError) {
      // Help and version exit 0; usage errors were printed by commander already.
      code = error.exitCode;
    } else if (error instanceof ConfigError) {
      io.stderr.write(`${error.message}\n`);
      code = 1;
    } else if (error instanceof AppError) {
      io.stderr.write(
        runner.json ? `${JSON.stringify(error.toOpenAI())}\n` : `error: ${error.message} (${error.code})\n`,
      );
      code = 1;
    } else {
      const message = error instanceof Error ? error.message : String(error);
      io.stderr.write(`error: ${message}\n`);
      code = 1;
    }
  } finally {
    await runner.close();
  }
  return code;
}
