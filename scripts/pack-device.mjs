#!/usr/bin/env node
// `npm run pack:device`: the device agent as an npm package of its own, switchyard-device-<version>.tgz
// in the project root. esbuild bundles apps/device/src/main.ts with what it imports (socket.io-client,
// commander, pino, zod and the protocol modules of libs/common) into one CommonJS file, so the package
// has no dependencies: no Nest, Prisma, BullMQ or Postgres driver, nothing to download at install.
// The same bundle is what the single executable embeds (scripts/build-device-binary.mjs).
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const stage = join(root, 'dist/device-package');
/** The version the agent announces (agent_version) is the package's. */
export const version = /AGENT_VERSION = '([^']+)'/.exec(
  readFileSync(join(root, 'apps/device/src/version.ts'), 'utf8'),
)[1];

/** Bundles the agent into `outfile` (CommonJS, Node 20); returns its size in bytes. */
export async function bundleAgent(outfile) {
  const result = await build({
    entryPoints: [join(root, 'apps/device/src/main.ts')],
    outfile,
    bundle: true,
    platform: 'node',
    target: 'node20',
    format: 'cjs',
    tsconfig: join(root, 'tsconfig.json'),
    banner: { js: '#!/usr/bin/env node' },
    legalComments: 'linked',
    // ws's optional native helpers are not in the package (nor in a single executable, which can load
    // only built-in modules): it does without them, and is told so instead of trying at every start.
    define: { 'process.env.WS_NO_BUFFER_UTIL': '"1"', 'process.env.WS_NO_UTF_8_VALIDATE': '"1"' },
    minifySyntax: true,
    metafile: true,
    logLevel: 'warning',
  });
  return Object.values(result.metafile.outputs).reduce((n, o) => n + o.bytes, 0);
}

async function main() {
  rmSync(stage, { recursive: true, force: true });
  mkdirSync(join(stage, 'bin'), { recursive: true });
  const bin = join(stage, 'bin/switchyard-device.js');
  await bundleAgent(bin);
  chmodSync(bin, 0o755);
  const rootPackage = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
  writeFileSync(
    join(stage, 'package.json'),
    `${JSON.stringify(
      {
        name: 'switchyard-device',
        version,
        description:
          'Switchyard device agent: serves models from a local runtime (Ollama, vLLM, llama.cpp, LM Studio) to a Switchyard network',
        license: rootPackage.license ?? 'UNLICENSED',
        bin: { 'switchyard-device': 'bin/switchyard-device.js' },
        files: ['bin/'],
        engines: { node: '>=20.19' },
      },
      null,
      2,
    )}\n`,
  );
  writeFileSync(
    join(stage, 'README.md'),
    [
      '# switchyard-device',
      '',
      'The Switchyard device agent. With a device token from the operator of a Switchyard network:',
      '',
      '```sh',
      'export SWITCHYARD_DEVICE_TOKEN=syd_...',
      'switchyard-device --server https://dispatcher.example.org --backend ollama',
      '```',
      '',
      '`switchyard-device --help` lists every option. The agent has no dependencies: everything it runs is in',
      '`bin/switchyard-device.js`.',
      '',
    ].join('\n'),
  );
  const out = execFileSync('npm', ['pack', '--json', '--pack-destination', root], { cwd: stage, encoding: 'utf8' });
  const [packed] = JSON.parse(out);
  process.stdout.write(
    `${join(root, packed.filename)}: ${packed.entryCount} files, ${(packed.size / 1024).toFixed(0)} KiB packed, ` +
      `${(packed.unpackedSize / 1024).toFixed(0)} KiB installed\n`,
  );
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  await main();
}
