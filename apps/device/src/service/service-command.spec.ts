import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { serviceCommand, withoutSecrets } from './service-command';

const TOKEN = `syd_${'b'.repeat(40)}`;
const COMMAND = ['/usr/local/bin/switchyard-device'];

/** The home directory of the user the tests install for (a temporary one). */
let home = '';

function run(args: string[]) {
  let out = '';
  let err = '';
  const code = serviceCommand(
    ['node', 'switchyard-device', 'service', ...args],
    { writeOut: (s) => (out += s), writeErr: (s) => (err += s) },
    { command: COMMAND, home },
  );
  return { code, out, err };
}

describe('switchyard-device service install', () => {
  const previousToken = process.env.SWITCHYARD_DEVICE_TOKEN;

  beforeEach(() => {
    home = mkdtempSync(join(tmpdir(), 'switchyard-service-'));
    process.env.SWITCHYARD_DEVICE_TOKEN = TOKEN;
  });

  afterEach(() => {
    rmSync(home, { recursive: true, force: true });
    if (previousToken === undefined) {
      delete process.env.SWITCHYARD_DEVICE_TOKEN;
    } else {
      process.env.SWITCHYARD_DEVICE_TOKEN = previousToken;
    }
  });

  it('--print shows the unit and the 0600 environment file it would write, the token elided', () => {
    const { code, out } = run([
      'install',
      '--print',
      '--server',
      'https://dispatcher.example.com',
      '--backend',
      'openai',
      '--upstream',
      'http://127.0.0.1:8000/v1',
      '--api-key',
      'runtime-secret',
      '--model',
      'my model=llama',
    ]);
    expect(code).toBe(0);
    expect(out).toContain('# /etc/systemd/system/switchyard-device.service\n');
    expect(out).toContain('EnvironmentFile=/etc/switchyard/device.env\n');
    expect(out).toContain(
      'ExecStart=/usr/local/bin/switchyard-device --server https://dispatcher.example.com --backend openai ' +
        '--upstream http://127.0.0.1:8000/v1 --model "my model=llama"\n',
    );
    for (const line of [
      'KillSignal=SIGTERM',
      'Restart=on-failure',
      'RestartPreventExitStatus=1 2',
      'DynamicUser=true',
    ]) {
      expect(out).toContain(`${line}\n`);
    }
    expect(out).toContain('WantedBy=multi-user.target');
    expect(out).toContain('# /etc/switchyard/device.env (mode 0600; secrets elided here)\n');
    expect(out).toContain('SWITCHYARD_DEVICE_TOKEN=…\nSWITCHYARD_UPSTREAM_API_KEY=…\n');
    expect(out).not.toContain(TOKEN);
    expect(out).not.toContain('runtime-secret');
  });

  it('--user writes a user service under ~/.config, the token in a file only its owner reads', () => {
    const { code, out } = run(['install', '--user', '--server', 'http://127.0.0.1:8081', '--model', 'x']);
    expect(code).toBe(0);
    const unitPath = join(home, '.config/systemd/user/switchyard-device.service');
    const envPath = join(home, '.config/switchyard/device.env');
    expect(out).toContain(`wrote ${unitPath}\nwrote ${envPath} (mode 0600)`);
    expect(out).toContain('systemctl --user enable --now switchyard-device');
    const unit = readFileSync(unitPath, 'utf8');
    expect(unit).toContain(`EnvironmentFile=${envPath}\n`);
    expect(unit).toContain('ExecStart=/usr/local/bin/switchyard-device --server http://127.0.0.1:8081 --model x\n');
    expect(unit).toContain('WantedBy=default.target');
    expect(unit).not.toContain('DynamicUser');
    expect(readFileSync(envPath, 'utf8')).toBe(`SWITCHYARD_DEVICE_TOKEN=${TOKEN}\n`);
    expect(statSync(envPath).mode & 0o777).toBe(0o600);
  });

  it('checks the options as a run does, and knows only install', () => {
    expect(run(['install', '--user', '--model', 'x']).err).toMatch(/--server/);
    delete process.env.SWITCHYARD_DEVICE_TOKEN;
    expect(run(['install', '--user', '--server', 'http://a:1', '--model', 'x']).err).toMatch(/no device token/);
    expect(run(['remove'])).toMatchObject({
      code: 2,
      err: expect.stringMatching(/^usage: switchyard-device service install/),
    });
  });

  it('keeps secrets off ExecStart, in either spelling', () => {
    expect(
      withoutSecrets(['--token', 't', '--server', 's', '--token-file=/f', '--api-key', 'k', '--model', 'm']),
    ).toEqual(['--server', 's', '--model', 'm']);
  });
});
