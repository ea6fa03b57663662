import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { projectPath } from '../paths/project-root';
import { DISPATCHER_NODE_FLAGS, DISPATCHER_SCRIPT, missingNodeFlags, nodeFlagsFor } from './node-flags';

void describe('node flags', () => {
  void it('gives the dispatcher its flags and every other entry point none', () => {
    assert.deepEqual(nodeFlagsFor(DISPATCHER_SCRIPT), [...DISPATCHER_NODE_FLAGS]);
    assert.deepEqual(nodeFlagsFor('apps/api/src/main.js'), []);
    assert.deepEqual(nodeFlagsFor('apps/device/src/main.js'), []);
  });

  void it('npm run start:dispatcher and dev:dispatcher pass the same flags to node', () => {
    const manifest = JSON.parse(readFileSync(projectPath('package.json'), 'utf8')) as {
      scripts: Record<string, string>;
    };
    const node = ['node', ...DISPATCHER_NODE_FLAGS].join(' ');
    assert.equal(manifest.scripts['start:dispatcher'], `${node} dist/${DISPATCHER_SCRIPT}`);
    assert.ok(manifest.scripts['dev:dispatcher'].endsWith(`nest start dispatcher --watch --exec "${node}"`));
  });

  void it("docker-compose.yml's dispatcher passes the same flags to node", () => {
    const compose = readFileSync(projectPath('docker-compose.yml'), 'utf8');
    const command = ['node', ...DISPATCHER_NODE_FLAGS, `dist/${DISPATCHER_SCRIPT}`].map((p) => `'${p}'`).join(', ');
    assert.ok(compose.includes(`command: [${command}]`), `docker-compose.yml has no command: [${command}]`);
  });

  void it('names the flags a process was started without', () => {
    assert.deepEqual(missingNodeFlags([...DISPATCHER_NODE_FLAGS, '--enable-source-maps']), []);
    assert.deepEqual(missingNodeFlags([]), [...DISPATCHER_NODE_FLAGS]);
    assert.deepEqual(missingNodeFlags([DISPATCHER_NODE_FLAGS[0]]), DISPATCHER_NODE_FLAGS.slice(1));
  });
});
