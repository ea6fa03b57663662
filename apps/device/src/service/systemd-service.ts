import { join } from 'node:path';

/** Where a service's two files go, and how systemd is told about them. */
export interface ServicePlan {
  unitPath: string;
  envPath: string;
  unit: string;
  /** The environment file: the token (and the other secrets the agent reads from the environment). */
  env: string;
  /** The mode the environment file is written with: its owner only. */
  envMode: number;
  /** What to run next. */
  next: string[];
}

export interface ServiceInput {
  /** A user service (`systemctl --user`, under ~/.config) instead of a system one (/etc). */
  user: boolean;
  /** The user's home directory, for a user service. */
  home: string;
  /** The command that runs the agent: this executable, or node and the package's script. */
  command: string[];
  /** The agent's options, the token's left out (it goes to the environment file). */
  args: string[];
  token: string;
  /** SWITCHYARD_UPSTREAM_API_KEY, when the runtime wants one: a secret as well. */
  upstreamApiKey?: string;
}

const NAME = 'switchyard-device';

/** systemd's quoting of one ExecStart word: double quotes around a word that needs them, `\` before `"`, `\` and `%` doubled. */
function quote(word: string): string {
  const escaped = word.replaceAll('%', '%%');
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(escaped) ? escaped : `"${escaped.replace(/(["\\])/g, '\\$1')}"`;
}

/**
 * The unit and the environment file of the agent as a systemd service (docs/device.md, "Run as a
 * service"): restarted on failure but not after a refused token or bad options (exit 1 and 2), SIGTERM
 * lets the running task finish, and the token is in a file only its owner reads, never on a command line.
 */
export function systemdService(input: ServiceInput): ServicePlan {
  const dir = input.user ? join(input.home, '.config/systemd/user') : '/etc/systemd/system';
  const envDir = input.user ? join(input.home, '.config/switchyard') : '/etc/switchyard';
  const unitPath = join(dir, `${NAME}.service`);
  const envPath = join(envDir, 'device.env');
  const unit = [
    '[Unit]',
    'Description=Switchyard device agent',
    'Wants=network-online.target',
    'After=network-online.target ollama.service',
    '',
    '[Service]',
    'Type=simple',
    `EnvironmentFile=${envPath}`,
    `ExecStart=${[...input.command, ...input.args].map(quote).join(' ')}`,
    '# SIGTERM lets the running task finish; systemd sends SIGKILL after TimeoutStopSec.',
    'KillSignal=SIGTERM',
    'KillMode=mixed',
    'TimeoutStopSec=300',
    'Restart=on-failure',
    'RestartSec=5',
    '# Exit 1: the token or the protocol version was refused; 2: bad options. Restarting will not help.',
    'RestartPreventExitStatus=1 2',
    'NoNewPrivileges=true',
    ...(input.user ? [] : ['DynamicUser=true', 'ProtectSystem=strict', 'ProtectHome=true', 'PrivateTmp=true']),
    '',
    '[Install]',
    `WantedBy=${input.user ? 'default.target' : 'multi-user.target'}`,
    '',
  ].join('\n');
  const env = [
    `SWITCHYARD_DEVICE_TOKEN=${input.token}`,
    ...(input.upstreamApiKey ? [`SWITCHYARD_UPSTREAM_API_KEY=${input.upstreamApiKey}`] : []),
    '',
  ].join('\n');
  const systemctl = input.user ? 'systemctl --user' : 'systemctl';
  return {
    unitPath,
    envPath,
    unit,
    env,
    envMode: 0o600,
    next: [
      `${systemctl} daemon-reload`,
      `${systemctl} enable --now ${NAME}`,
      `journalctl ${input.user ? '--user ' : ''}-u ${NAME} -f`,
    ],
  };
}
