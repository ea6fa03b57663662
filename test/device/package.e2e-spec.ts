import { execFile, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import {
  Proc,
  closeDb,
  createDevice,
  createTenant,
  startApi,
  startDispatcher,
  uniq,
  waitOnline,
} from '../support/stack';
import type { Api, Dispatcher, Tenant } from '../support/stack';
import { expectStatus } from '../support/expect-status';
import { AGENT_VERSION } from '../../apps/device/src/version';
import { chat } from './support/device';
import { FakeOpenAI } from './support/fake-runtimes';

const run = promisify(execFile);
const ROOT = join(__dirname, '../..');

/**
 * The agent outside the repository (issue 36): `npm run pack:device`'s tarball installed into an empty
 * directory, and `npm run build:device-binary`'s single executable, each run with an environment that
 * gives it no access to the repository's node_modules (no NODE_PATH, another working directory; the
 * executable with no node on its PATH), serve completions end to end against a real dispatcher.
 */
describe('the device agent as a package and as a single executable', () => {
  let api: Api;
  let dispatcher: Dispatcher;
  let tenant: Tenant;
  /** Outside the repository: nothing up its tree holds a node_modules of ours. */
  let home: string;
  let installed: string;
  let binary: string;
  const sim = uniq('packaged-sim');
  const served = uniq('packaged-openai');
  const runtime = new FakeOpenAI(['tiny-llama']);
  const agents: Proc[] = [];

  /** Starts the agent `command` with only the environment a device owner's shell would give it. */
  function agent(command: string, args: string[], token: string, path: string): Proc {
    const child = spawn(command, ['--server', dispatcher.url, ...args], {
      cwd: home,
      env: { PATH: path, HOME: home, SWITCHYARD_DEVICE_TOKEN: token },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const proc = new Proc(child);
    agents.push(proc);
    return proc;
  }

  beforeAll(async () => {
    home = mkdtempSync(join(tmpdir(), 'switchyard-device-owner-'));
    const packed = await run(process.execPath, [join(ROOT, 'scripts/pack-device.mjs')], { cwd: ROOT });
    const tarball = /^(\S+\.tgz):/.exec(packed.stdout)![1];
    await run('npm', ['install', '--prefix', home, '--no-audit', '--no-fund', '--no-package-lock', tarball], {
      cwd: home,
      env: { PATH: process.env.PATH, HOME: home },
    });
    installed = join(home, 'node_modules/.bin/switchyard-device');
    const built = await run(process.execPath, [join(ROOT, 'scripts/build-device-binary.mjs')], { cwd: ROOT });
    binary = /^(\S+): /.exec(built.stdout)![1];
    runtime.handlers.set('*', FakeOpenAI.reply({ choices: [['Hello', ' from', ' the', ' package']] }));
    await runtime.start();
    // At info, the dispatcher logs each announce with the agent's version.
    [api, dispatcher] = await Promise.all([startApi(), startDispatcher({ LOG_LEVEL: 'info' })]);
    tenant = await createTenant([sim, served]);
  });

  afterAll(async () => {
    await Promise.all(agents.map((a) => a.stop('SIGKILL')));
    await Promise.all([api?.stop(), dispatcher?.stop(), runtime.stop()]);
    rmSync(home, { recursive: true, force: true });
    await closeDb();
  });

  test('the package installs alone: no dependency, only the agent', () => {
    expect(readdirSync(join(home, 'node_modules')).filter((name) => !name.startsWith('.'))).toEqual([
      'switchyard-device',
    ]);
  });

  test('installed from the tarball, it serves the sim and an OpenAI-compatible runtime, announcing its version', async () => {
    // Node on the PATH (the package needs it), and nothing else of this machine's.
    const path = `${dirname(process.execPath)}:/usr/bin:/bin`;
    const version = await run(installed, ['--version'], { cwd: home, env: { PATH: path } });
    expect(version.stdout.trim()).toBe(AGENT_VERSION);

    const simDevice = await createDevice();
    const simAgent = agent(installed, ['--backend', 'sim', '--model', sim, '--sim-tokens', '3'], simDevice.token, path);
    await waitOnline([sim], simDevice.token, { proc: simAgent });
    const simmed = await chat(api, tenant, { model: sim });
    expectStatus(simmed, 200);
    expect(simmed.body.choices[0].message.content.length).toBeGreaterThan(0);

    const openaiDevice = await createDevice();
    const openaiAgent = agent(
      installed,
      ['--backend', 'openai', '--upstream', `${runtime.url}/v1`, '--model', `${served}=tiny-llama`],
      openaiDevice.token,
      path,
    );
    await waitOnline([served], openaiDevice.token, { proc: openaiAgent });
    const answered = await chat(api, tenant, { model: served });
    expectStatus(answered, 200);
    expect(answered.body.choices[0].message.content).toBe('Hello from the package');
    // What the dispatcher was told: the package's version.
    expect(dispatcher.proc.output).toContain(`"agent":"${AGENT_VERSION}"`);
    // The token came from the environment: no warning about the process list.
    expect(simAgent.output).not.toContain('--token is visible');

    // The service it would install runs this package's script with node, the token in a 0600 file.
    const service = await run(
      installed,
      ['service', 'install', '--user', '--print', '--server', dispatcher.url, '--backend', 'sim', '--model', sim],
      { cwd: home, env: { PATH: path, HOME: home, SWITCHYARD_DEVICE_TOKEN: simDevice.token } },
    );
    expect(service.stdout).toContain(`# ${home}/.config/systemd/user/switchyard-device.service\n`);
    expect(service.stdout).toContain(
      `ExecStart=${process.execPath} ${home}/node_modules/switchyard-device/bin/switchyard-device.js ` +
        `--server ${dispatcher.url} --backend sim --model ${sim}\n`,
    );
    expect(service.stdout).toContain(`# ${home}/.config/switchyard/device.env (mode 0600; secrets elided here)\n`);
    expect(service.stdout).not.toContain(simDevice.token);
  });

  test('the single executable serves with no node on its PATH', async () => {
    const empty = join(home, 'empty-bin');
    mkdirSync(empty, { recursive: true });
    const device = await createDevice();
    const model = uniq('binary-sim');
    await createTenant([model]).then((t) => (tenant = t));
    const proc = agent(binary, ['--backend', 'sim', '--model', model, '--sim-tokens', '3'], device.token, empty);
    await waitOnline([model], device.token, { proc });
    const res = await chat(api, tenant, { model });
    expectStatus(res, 200);
    expect(res.body.choices[0].message.content.length).toBeGreaterThan(0);
    // Its service runs the executable itself.
    const service = await run(binary, ['service', 'install', '--print', '--server', dispatcher.url, '--model', model], {
      cwd: home,
      env: { PATH: empty, SWITCHYARD_DEVICE_TOKEN: device.token },
    });
    expect(service.stdout).toContain(`ExecStart=${binary} --server ${dispatcher.url} --model ${model}\n`);
  });
});
