import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DeviceOptions } from './options';
import { parseArgs, parseModelMapping, USAGE_EXIT_CODE } from './options';
import { AGENT_VERSION } from './version';

const TOKEN = `syd_${'a'.repeat(40)}`;
const base = ['node', 'device', '--server', 'http://127.0.0.1:8081', '--token', TOKEN];

function parse(args: string[]): { options?: DeviceOptions; exitCode?: number; stderr: string } {
  let stderr = '';
  const result = parseArgs([...base, ...args], { writeOut: () => undefined, writeErr: (s) => (stderr += s) });
  return result.ok ? { options: result.options, stderr } : { exitCode: result.exitCode, stderr };
}

void describe('parseArgs', () => {
  void it('configures the ollama backend with its default URL, discovering models', () => {
    const { options } = parse(['--backend', 'ollama']);
    expect(options?.backend).toEqual({
      name: 'ollama',
      options: { upstream: 'http://127.0.0.1:11434', models: [], discoveryIntervalMs: 15_000, healthIntervalMs: 3_000 },
    });
  });

  void it('maps public ids to upstream names, takes an API key, features and intervals', () => {
    const { options } = parse([
      '--backend',
      'openai',
      '--upstream',
      'http://127.0.0.1:8000/v1/',
      '--model',
      'bartowski/Llama-3.2-3B-Instruct-GGUF:Q4_K_M=llama3.2:3b',
      '--model',
      'plain',
      '--api-key',
      'secret',
      '--features',
      'tools,stream_usage',
      '--discovery-interval-ms',
      '500',
      '--health-interval-ms',
      '250',
    ]);
    expect(options?.backend).toEqual({
      name: 'openai',
      options: {
        upstream: 'http://127.0.0.1:8000/v1',
        models: [
          { public: 'bartowski/Llama-3.2-3B-Instruct-GGUF:Q4_K_M', upstream: 'llama3.2:3b' },
          { public: 'plain', upstream: 'plain' },
        ],
        apiKey: 'secret',
        features: ['tools', 'stream_usage'],
        discoveryIntervalMs: 500,
        healthIntervalMs: 250,
      },
    });
  });

  void it('takes --server more than once, keeping server as the first', () => {
    const { options } = parse([
      '--model',
      'x',
      '--server',
      'http://10.0.0.2:8081/',
      '--server',
      'http://127.0.0.1:8081',
    ]);
    expect(options?.servers).toEqual(['http://127.0.0.1:8081', 'http://10.0.0.2:8081']);
    expect(options?.server).toBe('http://127.0.0.1:8081');
    const refused = parse(['--model', 'x', '--server', 'http://h:1/path']);
    expect(refused.exitCode).toBe(USAGE_EXIT_CODE);
    expect(refused.stderr).toMatch(/without a path/);
  });

  void it('reads several dispatchers from SWITCHYARD_SERVER, comma-separated', () => {
    const previous = process.env.SWITCHYARD_SERVER;
    process.env.SWITCHYARD_SERVER = 'http://a:1, http://b:2';
    try {
      const result = parseArgs(['node', 'device', '--token', TOKEN, '--model', 'x'], {
        writeOut: () => undefined,
        writeErr: () => undefined,
      });
      if (!result.ok) {
        throw new Error('expected result.ok');
      }
      expect(result.options.servers).toEqual(['http://a:1', 'http://b:2']);
      expect(result.options.server).toBe('http://a:1');
    } finally {
      if (previous === undefined) {
        delete process.env.SWITCHYARD_SERVER;
      } else {
        process.env.SWITCHYARD_SERVER = previous;
      }
    }
  });

  void it('declares web_search only when asked to', () => {
    const sim = (args: string[]) =>
      (parse(['--model', 'x', ...args]).options?.backend.options as { features: string[] }).features;
    expect(sim([])).not.toContain('web_search');
    expect(sim(['--web-search'])).toContain('web_search');
    expect(sim(['--sim-features', 'tools,web_search'])).toEqual(['tools', 'web_search']);
    const ollama = parse(['--backend', 'ollama', '--web-search']).options?.backend.options;
    expect(ollama).toMatchObject({ webSearch: true });
    const listed = parse(['--backend', 'ollama', '--web-search', '--features', 'tools']).options?.backend.options;
    expect(listed).toMatchObject({ features: ['tools', 'web_search'], webSearch: true });
  });

  void it('sets the length of the sim’s vectors, 768 by default', () => {
    const dimensions = (args: string[]) =>
      (parse(['--model', 'x', ...args]).options?.backend.options as { embeddingDimensions: number })
        .embeddingDimensions;
    expect(dimensions([])).toBe(768);
    expect(dimensions(['--sim-embedding-dimensions', '4096'])).toBe(4096);
    for (const bad of ['0', '16385', '1.5']) {
      expect(parse(['--model', 'x', '--sim-embedding-dimensions', bad]).exitCode).toBe(USAGE_EXIT_CODE);
    }
    expect(parse(['--backend', 'ollama', '--sim-embedding-dimensions', '8']).stderr).toMatch(
      /--sim-embedding-dimensions applies only to --backend sim/,
    );
  });

  void it('keeps the sim backend as it was', () => {
    const { options } = parse(['--model', 'a=b', '--sim-tokens', '3']);
    expect(options?.backend.name).toBe('sim');
    expect((options?.backend.options as { models: string[] }).models).toEqual(['a=b']);
  });

  void it('refuses options that do not fit the backend, and bad values', () => {
    const refused = (args: string[], message: RegExp) => {
      const { exitCode, stderr } = parse(args);
      expect({ exitCode, message: args.join(' ') }).toEqual(expect.objectContaining({ exitCode: USAGE_EXIT_CODE }));
      expect(stderr).toMatch(message);
    };
    refused(['--backend', 'openai'], /needs --upstream/);
    refused(['--backend', 'ollama', '--sim-tokens', '3'], /--sim-tokens applies only to --backend sim/);
    refused(['--model', 'x', '--upstream', 'http://h:1'], /--upstream applies only to --backend ollama and openai/);
    refused(['--backend', 'ollama', '--upstream', 'ftp://h'], /http:\/\/ or https:\/\//);
    refused(['--backend', 'ollama', '--model', 'a='], /upstream name must be/);
    refused(['--backend', 'ollama', '--model', 'a=b', '--model', 'a=c'], /mapped twice/);
    refused(['--backend', 'ollama', '--discovery-interval-ms', '5'], /from 100/);
    refused(['--backend', 'ollama', '--features', 'telepathy'], /unknown feature/);
  });

  void it('splits a mapping at the first =', () => {
    expect(parseModelMapping('a=b=c')).toEqual({ public: 'a', upstream: 'b=c' });
    expect(parseModelMapping('x')).toEqual({ public: 'x', upstream: 'x' });
  });
});

void describe('the device token', () => {
  const dir = mkdtempSync(join(tmpdir(), 'switchyard-token-'));
  const file = (name: string, content: string, mode: number) => {
    const path = join(dir, name);
    writeFileSync(path, content);
    chmodSync(path, mode);
    return path;
  };
  const run = (args: string[], env: Record<string, string> = {}) => {
    const previous = process.env.SWITCHYARD_DEVICE_TOKEN;
    if (env.SWITCHYARD_DEVICE_TOKEN === undefined) {
      delete process.env.SWITCHYARD_DEVICE_TOKEN;
    } else {
      process.env.SWITCHYARD_DEVICE_TOKEN = env.SWITCHYARD_DEVICE_TOKEN;
    }
    let stderr = '';
    try {
      const result = parseArgs(['node', 'device', '--server', 'http://127.0.0.1:8081', '--model', 'x', ...args], {
        writeOut: () => undefined,
        writeErr: (s) => (stderr += s),
      });
      return { token: result.ok ? result.options.token : null, exitCode: result.ok ? 0 : result.exitCode, stderr };
    } finally {
      if (previous === undefined) {
        delete process.env.SWITCHYARD_DEVICE_TOKEN;
      } else {
        process.env.SWITCHYARD_DEVICE_TOKEN = previous;
      }
    }
  };

  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  void it('is read from SWITCHYARD_DEVICE_TOKEN without a word', () => {
    expect(run([], { SWITCHYARD_DEVICE_TOKEN: TOKEN })).toEqual({ token: TOKEN, exitCode: 0, stderr: '' });
  });

  void it('is read from a --token-file only you can read, whitespace around it aside', () => {
    const path = file('mine', `${TOKEN}\n`, 0o600);
    expect(run(['--token-file', path])).toEqual({ token: TOKEN, exitCode: 0, stderr: '' });
    expect(run(['--token-file', file('read-only', TOKEN, 0o400)]).token).toBe(TOKEN);
  });

  void it('refuses a --token-file other users may read, saying how to mend it', () => {
    for (const mode of [0o644, 0o640, 0o604]) {
      const path = file(`open-${mode.toString(8)}`, TOKEN, mode);
      const { exitCode, stderr } = run(['--token-file', path]);
      expect(exitCode).toBe(USAGE_EXIT_CODE);
      expect(stderr).toContain(`may be read by other users (mode ${mode.toString(8)}): run chmod 600 ${path}`);
      expect(stderr).not.toContain(TOKEN);
    }
    expect(run(['--token-file', join(dir, 'missing')]).stderr).toMatch(/cannot be read: ENOENT/);
  });

  void it('warns when given as --token, which other users see in the process list', () => {
    const { token, stderr } = run(['--token', TOKEN]);
    expect(token).toBe(TOKEN);
    expect(stderr).toMatch(/^warning: --token is visible to every user of this machine/);
  });

  void it('is refused when missing, given twice, or not a device token, without echoing it', () => {
    expect(run([]).stderr).toMatch(/no device token: set SWITCHYARD_DEVICE_TOKEN/);
    const path = file('twice', TOKEN, 0o600);
    expect(run(['--token', TOKEN, '--token-file', path]).stderr).toMatch(/give the token once/);
    const wrong = run(['--token-file', file('wrong', 'syd_short', 0o600)]);
    expect(wrong.exitCode).toBe(USAGE_EXIT_CODE);
    expect(wrong.stderr).toMatch(/--token-file must hold a device token/);
    expect(wrong.stderr).not.toContain('syd_short');
  });

  void it('--version prints the version the dispatcher sees in the announce', () => {
    let out = '';
    const result = parseArgs(['node', 'device', '--version'], {
      writeOut: (s) => (out += s),
      writeErr: () => undefined,
    });
    expect(result).toEqual({ ok: false, exitCode: 0 });
    expect(out.trim()).toBe(AGENT_VERSION);
  });
});
