import { Command, CommanderError, InvalidArgumentError } from 'commander';
import { ConfigError, loadConfig } from '@app/common/config/config';
import { AppError } from '@app/common/errors/app-error';
import type { AdminService } from '@app/common/admin/admin.service';
import type { FleetDevice, FleetQueue } from '@app/common/admin/fleet.service';
import { CliServices } from './cli-services';
import { addMigrateCommand } from './migrate-command';
import { renderHuman } from './output';
import { addUsageCommand } from './usage-command';

/** How a command's result is printed: a note on stderr after it, and its human form when not the result itself. */
export interface RunOptions {
  note?: string;
  human?: (result: unknown) => unknown;
}
export type Run = (action: (services: CliServices) => Promise<unknown>, opts?: RunOptions) => Promise<void>;

/**
 * `switchyard`: the operators' command line. Every command is one call of the admin services
 * (libs/common/src/admin) or the usage service, the same code the admin HTTP API runs.
 */
function buildProgram(io: CliIo, run: Run) {
  /** An operator command: one call of an admin service. */
  const admin = (action: (a: AdminService) => Promise<unknown>, opts?: RunOptions) =>
    run(async (s) => action(await s.admin()), opts);

  // Output settings first: subcommands copy them when they are created.
  const program = new Command('switchyard')
    .configureOutput({ writeOut: (text) => void io.stdout.write(text), writeErr: (text) => void io.stderr.write(text) })
    .description('Operate Switchyard: organizations, API keys, models, devices, tasks and usage')
    .option('--json', 'print one JSON object instead of human-readable text')
    .showHelpAfterError()
    .exitOverride();

  const positiveInt = (value: string) => {
    if (!/^[1-9][0-9]*$/.test(value)) {
      throw new InvalidArgumentError('must be a positive integer');
    }
    return Number(value);
  };

  // Model ids never contain a comma (MODEL_ID); empty items (a trailing comma) are dropped.
  const modelList = (value: string) =>
    value
      .split(',')
      .map((m) => m.trim())
      .filter(Boolean);

  const org = program.command('org').description('organizations (tenants)');
  org
    .command('create <name>')
    .description('create an organization')
    .action((name: string) => admin((a) => a.orgs.create(name)));
  org
    .command('list')
    .description('list organizations')
    .action(() => admin((a) => a.orgs.list()));

  // commander keeps a parsed null as '', so `none` is carried as 0 and turned into null below.
  const limit = (value: string) => (value === 'none' || value === '0' ? 0 : positiveInt(value));
  const orNull = (value: number | undefined) => (value === 0 ? null : value);
  org
    .command('limits <name>')
    .description('set limits of an organization (a number, or none to remove a limit); no option shows them')
    .option('--rpm <n|none>', 'requests per minute', limit)
    .option('--concurrency <n|none>', 'requests at once', limit)
    .option('--max-queued <n|none>', 'queued requests per model', limit)
    .action((name: string, opts: { rpm?: number; concurrency?: number; maxQueued?: number }) =>
      admin((a) =>
        a.orgs.setLimits(name, {
          rpm: orNull(opts.rpm),
          concurrency: orNull(opts.concurrency),
          maxQueued: orNull(opts.maxQueued),
        }),
      ),
    );

  const onOff = (value: string) => {
    if (value !== 'on' && value !== 'off') {
      throw new InvalidArgumentError('must be on or off');
    }
    return value === 'on';
  };
  org
    .command('network')
    .description('let the organization use the shared network (on, the default) or keep its prompts off it (off)')
    .argument('<name>', 'organization')
    .argument('<on|off>', 'on or off', onOff)
    .action((name: string, network: boolean) => admin((a) => a.orgs.setLimits(name, { network })));
  org
    .command('weight')
    .description("set the organization's share of a queue when several organizations wait")
    .argument('<name>', 'organization')
    .argument('<n>', 'weight, 1 to 100 (default 1)', positiveInt)
    .action((name: string, weight: number) => admin((a) => a.orgs.setLimits(name, { weight })));

  const key = program.command('key').description('API keys of an organization');
  key
    .command('create')
    .description('create an API key; it is printed this once and never again')
    .requiredOption('--org <org-name>', 'organization that owns the key')
    .option('--label <text>', 'a note to tell keys apart')
    .option('--expires-in <duration>', 'lifetime such as 90s, 45m, 12h or 30d')
    .action((opts: { org: string; label?: string; expiresIn?: string }) =>
      admin((a) => a.keys.create(opts), { note: 'Store this key now: it is not shown again.' }),
    );
  key
    .command('list')
    .description("list an organization's keys (prefixes only)")
    .requiredOption('--org <org-name>', 'organization')
    .action((opts: { org: string }) => admin((a) => a.keys.list(opts.org)));
  key
    .command('revoke <key-id>')
    .description('revoke a key (takes effect within a second)')
    .action((id: string) => admin((a) => a.keys.revoke(id)));
  key
    .command('rotate <key-id>')
    .description('replace a key: prints a new key once; the old one keeps working for the grace, then expires')
    .option('--grace <duration>', 'how long the old key keeps working: 0 (at once), 90s, 45m, 12h, 30d', '24h')
    .action((id: string, opts: { grace: string }) =>
      admin((a) => a.keys.rotate(id, { grace: opts.grace }), {
        note: 'Store this key now: it is not shown again.',
      }),
    );

  const model = program.command('model').description('the model catalog and its enablement per organization');
  model
    .command('add <model-id>')
    .description('add a model to the catalog')
    .option('--max-output-tokens <n>', 'upper bound for max_tokens on this model', positiveInt)
    .option('--owned-by <text>', 'owned_by as /v1/models shows it')
    .option('--network', 'let network devices serve it too (default: only the direct devices of its orgs)')
    .action((id: string, opts: { maxOutputTokens?: number; ownedBy?: string; network?: boolean }) =>
      admin((a) => a.models.add({ id, ...opts })),
    );
  model
    .command('network')
    .description(
      'let network devices serve a model (on), or keep it to the direct devices of its organizations (off, the default)',
    )
    .argument('<model-id>', 'catalog model')
    .argument('<on|off>', 'on or off', onOff)
    .action((id: string, network: boolean) => admin((a) => a.models.update(id, { network })));
  model
    .command('list')
    .description('list the catalog')
    .action(() => admin((a) => a.models.list()));
  model
    .command('enable <model-id>')
    .description('enable a model for an organization')
    .requiredOption('--org <org-name>', 'organization')
    .action((id: string, opts: { org: string }) => admin((a) => a.models.enable(id, opts.org)));
  model
    .command('disable <model-id>')
    .description('disable a model for an organization')
    .requiredOption('--org <org-name>', 'organization')
    .action((id: string, opts: { org: string }) => admin((a) => a.models.disable(id, opts.org)));

  const device = program.command('device').description('devices that serve models');
  device
    .command('create <name>')
    .description('register a device; without --org it serves the shared network')
    .option('--org <org-name>', 'organization whose own (direct) device this is')
    .option('--models <a,b>', 'restrict it to these catalog models (default: any it may serve)', modelList)
    .action((name: string, opts: { org?: string; models?: string[] }) =>
      admin((a) => a.devices.create(name, opts.org, opts.models), {
        note: 'Store this token now: it is not shown again.',
      }),
    );
  device
    .command('models <device-id>')
    .description('restrict a device to listed models (--set), or let it serve any it may (--clear)')
    .option('--set <a,b>', 'the only catalog models it may serve', modelList)
    .option('--clear', 'lift the restriction')
    .action((id: string, opts: { set?: string[]; clear?: boolean }) => {
      if ((opts.set === undefined) === (opts.clear === undefined)) {
        throw new AppError('invalid_request', 'give either --set <a,b> or --clear');
      }
      return admin((a) => a.devices.setModels(id, opts.set ?? null));
    });
  device
    .command('list')
    .description('list devices with their live state (online, models served, current task)')
    .action(() => run(async (s) => (await s.fleet()).listDevices(), { human: deviceTable }));
  device
    .command('show <device-id>')
    .description('show one device with its live state')
    .action((id: string) => run(async (s) => (await s.fleet()).showDevice(id)));
  device
    .command('revoke <device-id>')
    .description('revoke a device token (a connected device is disconnected)')
    .action((id: string) => admin((a) => a.devices.revoke(id)));

  const task = program.command('task').description('task records');
  task
    .command('show <task-address>')
    .description('show a task record')
    .action((address: string) => admin((a) => a.tasks.show(address)));

  program
    .command('queues')
    .description('the queues: jobs waiting, oldest wait, devices online and busy, and each organization’s line')
    .action(() => run(async (s) => (await s.fleet()).queues(), { human: queueTable }));

  addUsageCommand(program, run);
  addMigrateCommand(program, io);
  return program;
}

/** The columns an operator scans in a device list; --json has every field. */
function deviceTable(result: unknown) {
  return (result as FleetDevice[]).map((d) => ({
    id: d.id,
    name: d.name,
    org: d.org,
    pool: d.pool,
    token_prefix: d.token_prefix,
    status: d.status,
    online: d.online,
    available: d.available,
    models: d.models,
    task: d.task,
    last_heartbeat_at: d.last_heartbeat_at,
  }));
}

function queueTable(result: unknown) {
  return (result as FleetQueue[]).map((q) => ({
    model: q.model,
    pool: q.pool,
    org: q.org,
    waiting: q.waiting,
    oldest_wait_ms: q.oldest_wait_ms,
    devices: q.devices_online,
    busy: q.devices_busy,
    lines: q.lines.map((l) => `${l.org ?? l.org_id}:${l.waiting}`),
  }));
}

/** Where a CLI run writes, and what it reads its configuration from. */
export interface CliIo {
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
  env: NodeJS.ProcessEnv;
}

/**
 * Runs one command line (`argv` as process.argv has it: node, script, then the arguments) and returns
 * its exit code. The binary calls it with the process's streams; tests call it in process.
 */
export async function runCli(argv: string[], io: CliIo): Promise<number> {
  let services: CliServices | undefined;
  let json = false;
  let code = 0;
  const program = buildProgram(io, async (action, opts = {}) => {
    json = Boolean(program.opts<{ json?: boolean }>().json);
    const config = loadConfig(io.env);
    services = new CliServices(config.DATABASE_URL, config.REDIS_URL);
    const result = await action(services);
    // A JSON list is wrapped so that --json always prints one object.
    const out = Array.isArray(result) ? { object: 'list', data: result } : result;
    io.stdout.write(json ? `${JSON.stringify(out)}\n` : renderHuman(opts.human ? opts.human(result) : result));
    if (opts.note && !json) {
      io.stderr.write(`${opts.note}\n`);
    }
  });
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
      io.stderr.write(json ? `${JSON.stringify(error.toOpenAI())}\n` : `error: ${error.message} (${error.code})\n`);
      code = 1;
    } else {
      const message = error instanceof Error ? error.message : String(error);
      io.stderr.write(`error: ${message}\n`);
      code = 1;
    }
  } finally {
    await services?.close();
  }
  return code;
}
