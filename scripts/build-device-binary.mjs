#!/usr/bin/env node
// `npm run build:device-binary`: the device agent as one executable for machines without Node,
// switchyard-device-linux-x64 in the project root. It is this Node binary with the agent's bundle
// (scripts/pack-device.mjs) injected as a single executable application
// (https://nodejs.org/api/single-executable-applications.html): a copy of node, a blob made with
// --experimental-sea-config, and postject to put the blob in the copy.
// A new Node in package.json's engines means a new build: the executable runs the Node that built it.
import { execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { arch, platform } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { bundleAgent } from './pack-device.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const work = join(root, 'dist/device-binary');
const output = join(root, `switchyard-device-${platform()}-${arch()}`);
/** The fuse node looks for in a binary to know it carries an application (Node's documentation). */
const FUSE = 'NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2';

rmSync(work, { recursive: true, force: true });
mkdirSync(work, { recursive: true });
const bundle = join(work, 'switchyard-device.js');
await bundleAgent(bundle);
const blob = join(work, 'switchyard-device.blob');
writeFileSync(
  join(work, 'sea-config.json'),
  JSON.stringify({ main: bundle, output: blob, disableExperimentalSEAWarning: true }),
);
execFileSync(process.execPath, ['--experimental-sea-config', join(work, 'sea-config.json')], { stdio: 'inherit' });
rmSync(output, { force: true });
copyFileSync(process.execPath, output);
chmodSync(output, 0o755);
// Node's symbols are of no use to a device owner: without them the file is about 12 MiB smaller.
// (binutils' strip; a machine without it builds the larger file.)
try {
  execFileSync('strip', ['--strip-all', output], { stdio: 'ignore' });
} catch {
  process.stderr.write('strip is not available: the executable keeps its symbols\n');
}
execFileSync(join(root, 'node_modules/.bin/postject'), [output, 'NODE_SEA_BLOB', blob, '--sentinel-fuse', FUSE], {
  stdio: ['ignore', 'ignore', 'inherit'],
});
const bytes = statSync(output).size;
process.stdout.write(`${output}: ${(bytes / 1024 / 1024).toFixed(1)} MiB (${bytes} bytes), node ${process.version}\n`);
