import { chmodSync, mkdirSync, realpathSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname } from 'node:path';
import { isSea } from 'node:sea';
import { parseArgs } from '../options';
import { systemdService } from './systemd-service';

interface Io {
  writeOut(s: string): void;
  writeErr(s: string): void;
}

/** Options that carry a secret: into the environment file, never onto ExecStart. */
const SECRET_OPTIONS = ['--token', '--token-file', '--api-key'];

/** The agent's arguments without the secret options (`--token x` and `--token=x` alike). */
export function withoutSecrets(args: string[]): string[] {
  const kept: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const name = args[i].split('=')[0];
    if (SECRET_OPTIONS.includes(name)) {
      if (!args[i].includes('=')) {
        i++;
      }
      continue;
    }
    kept.push(args[i]);
  }
  return kept;
}

/** How this agent is started again: the single executable itself, or node and the package's script. */
export function thisCommand(): string[] {
  return isSea() ? [process.execPath] : [process.execPath, realpathSync(process.argv[1])];
}

const USAGE = 'usage: switchyard-device service install [--user] [--print] <the options the agent runs with>\n';

/**
 * `switchyard-device service install [--user] [--print] <agent options>`: writes a systemd unit that
 * runs the agent with these options and a 0600 environment file with its token (checked as a run would
 * check them), then says how to start it; `--print` shows both instead (the token elided). Returns the
 * exit code.
 */
export function serviceCommand(
  argv: string[],
  io: Io,
  { command = thisCommand(), home = homedir() }: { command?: string[]; home?: string } = {},
): number {
  const [node, script, , sub, ...rest] = argv;
  if (sub !== 'install') {
    io.writeErr(USAGE);
    return 2;
  }
  const user = rest.includes('--user');
  const print = rest.includes('--print');
  const agentArgs = rest.filter((a) => a !== '--user' && a !== '--print');
  const parsed = parseArgs([node, script, ...agentArgs], io);
  if (!parsed.ok) {
    return parsed.exitCode;
  }
  const backend = parsed.options.backend;
  const plan = systemdService({
    user,
    home,
    command,
    args: withoutSecrets(agentArgs),
    token: parsed.options.token,
    upstreamApiKey: backend.name === 'sim' ? undefined : backend.options.apiKey,
  });
  if (print) {
    const shown = plan.env.replace(/^(SWITCHYARD_\w+=).*$/gm, (_line, name: string) => `${name}…`);
    io.writeOut(
      `# ${plan.unitPath}\n${plan.unit}\n# ${plan.envPath} (mode ${plan.envMode.toString(8).padStart(4, '0')}; secrets elided here)\n${shown}`,
    );
    return 0;
  }
  try {
    mkdirSync(dirname(plan.envPath), { recursive: true, mode: 0o700 });
    writeFileSync(plan.envPath, plan.env, { mode: plan.envMode });
    // An existing file keeps its mode through writeFileSync: set it.
    chmodSync(plan.envPath, plan.envMode);
    mkdirSync(dirname(plan.unitPath), { recursive: true });
    writeFileSync(plan.unitPath, plan.unit, { mode: 0o644 });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    io.writeErr(
      code === 'EACCES' || code === 'EPERM'
        ? `error: cannot write ${plan.unitPath}: run as root (sudo), or install a user service with --user\n`
        : `error: could not write the service: ${(error as Error).message}\n`,
    );
    return 1;
  }
  io.writeOut(`wrote ${plan.unitPath}\nwrote ${plan.envPath} (mode 0600)\nto start it:\n  ${plan.next.join('\n  ')}\n`);
  return 0;
}
