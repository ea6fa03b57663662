import { readFileSync } from 'node:fs';
import { projectPath } from '../paths/project-root';
import { DISPATCHER_NODE_FLAGS, DISPATCHER_SCRIPT, missingNodeFlags, nodeFlagsFor } from './node-flags';

void describe('node flags', () => {
  void it('gives the dispatcher its flags and every other entry point none', () => {
    expect(nodeFlagsFor(DISPATCHER_SCRIPT)).toStrictEqual([...DISPATCHER_NODE_FLAGS]);
    expect(nodeFlagsFor('apps/api/src/main.js')).toStrictEqual([]);
    expect(nodeFlagsFor('apps/device/src/main.js')).toStrictEqual([]);
  });

  void it('npm run start:dispatcher and dev:dispatcher pass the same flags to node', () => {
    const manifest = JSON.parse(readFileSync(projectPath('package.json'), 'utf8')) as {
      scripts: Record<string, string>;
    };
    const node = ['node', ...DISPATCHER_NODE_FLAGS].join(' ');
    expect(manifest.scripts['start:dispatcher']).toBe(`${node} dist/${DISPATCHER_SCRIPT}`);
    expect(manifest.scripts['dev:dispatcher'].endsWith(`nest start dispatcher --watch --exec "${node}"`)).toBe(true);
  });

  void it("docker-compose.yml's dispatcher passes the same flags to node", () => {
    const compose = readFileSync(projectPath('docker-compose.yml'), 'utf8');
    const command = ['node', ...DISPATCHER_NODE_FLAGS, `dist/${DISPATCHER_SCRIPT}`].map((p) => `'${p}'`).join(', ');
    expect({
      ok: compose.includes(`command: [${command}]`),
      message: `docker-compose.yml has no command: [${command}]`,
    }).toEqual(expect.objectContaining({ ok: true }));
  });

  void it('names the flags a process was started without', () => {
    expect(missingNodeFlags([...DISPATCHER_NODE_FLAGS, '--enable-source-maps'])).toStrictEqual([]);
    expect(missingNodeFlags([])).toStrictEqual([...DISPATCHER_NODE_FLAGS]);
    expect(missingNodeFlags([DISPATCHER_NODE_FLAGS[0]])).toStrictEqual(DISPATCHER_NODE_FLAGS.slice(1));
  });
});
