import { execFile } from 'node:child_process';
import { join } from 'node:path';
import {
  ADMIN_TOKEN,
  DIST,
  baseEnv,
  closeDb,
  createDevice,
  createTenant,
  freePort,
  http,
  startApi,
  startDispatcher,
  uniq,
} from '../support/stack';
import type { Api, Dispatcher } from '../support/stack';
import { ensureCatalog } from '../support/stack';
import { FakeOllama } from './support/fake-runtimes';

/**
 * `switchyard-device doctor` (issue 36): the real agent checks a setup against a real dispatcher and a
 * fake Ollama, one line per check, and exits 0 only when the device would serve a model; its dry-run
 * announce serves nothing.
 */
describe('switchyard-device doctor', () => {
  let api: Api;
  let dispatcher: Dispatcher;
  const model = uniq('doctor');
  const runtime = new FakeOllama(['llama3.2:3b']);

  /** Runs doctor with these options (the token from the environment); its exit code and lines. */
  async function doctor(token: string, args: string[]): Promise<{ code: number | null; lines: string[] }> {
    // execFile, not the harness's processes: a non-zero exit is what these checks expect.
    return new Promise((resolve) => {
      execFile(
        process.execPath,
        [join(DIST, 'apps/device/src/main.js'), 'doctor', ...args],
        { env: baseEnv({ SWITCHYARD_DEVICE_TOKEN: token }) },
        (error, stdout) => resolve({ code: error ? (error.code as number) : 0, lines: stdout.trim().split('\n') }),
      );
    });
  }

  beforeAll(async () => {
    await runtime.start();
    [api, dispatcher] = await Promise.all([startApi(), startDispatcher()]);
    await ensureCatalog([model]);
  });

  afterAll(async () => {
    await Promise.all([api?.stop(), dispatcher?.stop(), runtime.stop()]);
    await closeDb();
  });

  test('a good setup: every check ok, exit 0, and nothing served or trusted by the dry run', async () => {
    const device = await createDevice();
    const { code, lines } = await doctor(device.token, [
      '--server',
      dispatcher.url,
      '--backend',
      'ollama',
      '--upstream',
      runtime.url,
      '--model',
      `${model}=llama3.2:3b`,
    ]);
    expect(lines).toEqual([
      `ok   dispatcher ${dispatcher.url}: reachable`,
      `ok   token: accepted by ${dispatcher.url}`,
      expect.stringMatching(/^ok {3}protocol: version \d+ \(agent [\d.]+\)$/),
      `ok   runtime ${runtime.url}: reachable`,
      expect.stringMatching(
        new RegExp(
          `^ok {3}model ${model} \\(runtime: llama3\\.2:3b\\): would be served \\(network pool\\); features: .+`,
        ),
      ),
    ]);
    expect(code).toBe(0);
    const shown = await http('GET', `${api.url}/admin/devices/${device.id}`, {
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    // A dry run: no models taken, and the probation of a new device is not ended by it.
    expect(shown.body).toMatchObject({ models: [], trust: { state: 'probation' } });
  });

  test('each broken part exits non-zero with a line that names it', async () => {
    const device = await createDevice();
    const down = `http://127.0.0.1:${await freePort()}`;

    const noDispatcher = await doctor(device.token, ['--server', down, '--backend', 'sim', '--model', model]);
    expect(noDispatcher.code).toBe(1);
    expect(noDispatcher.lines).toEqual([
      expect.stringMatching(new RegExp(`^FAIL dispatcher ${down}: unreachable \\(ECONNREFUSED\\)`)),
    ]);

    const wrongToken = await doctor(`syd_${'x'.repeat(40)}`, [
      '--server',
      dispatcher.url,
      '--backend',
      'sim',
      '--model',
      model,
    ]);
    expect(wrongToken.code).toBe(1);
    expect(wrongToken.lines[1]).toMatch(/^FAIL token: refused by .*not a device token of this network, or revoked/);

    const noRuntime = await doctor(device.token, [
      '--server',
      dispatcher.url,
      '--backend',
      'ollama',
      '--upstream',
      down,
    ]);
    expect(noRuntime.code).toBe(1);
    expect(noRuntime.lines.at(-1)).toBe(
      `FAIL runtime ${down}: unreachable: start it, or check --upstream (and --api-key)`,
    );

    // A direct device of another organization, which does not have the model enabled.
    const other = await createTenant([]);
    const direct = await createDevice(other.org.name);
    const notEnabled = await doctor(direct.token, ['--server', dispatcher.url, '--backend', 'sim', '--model', model]);
    expect(notEnabled.code).toBe(1);
    expect(notEnabled.lines.at(-1)).toBe(
      `FAIL model ${model}: refused (not_enabled): the organization of this device does not have this model enabled: ask its operator`,
    );
  });
});
