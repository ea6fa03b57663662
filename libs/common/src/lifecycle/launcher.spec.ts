import { join } from 'node:path';
import { nodeCommand } from './launcher';
import { DISPATCHER_NODE_FLAGS, DISPATCHER_SCRIPT } from './node-flags';

void describe('nodeCommand', () => {
  void it("puts the entry point's own flags first, then the caller's, then the script in the build and its arguments", () => {
    expect(nodeCommand(DISPATCHER_SCRIPT, ['--x'], { build: '/build', flags: ['--cpu-prof'] })).toStrictEqual([
      ...DISPATCHER_NODE_FLAGS,
      '--cpu-prof',
      join('/build', DISPATCHER_SCRIPT),
      '--x',
    ]);
  });

  void it('gives any other entry point no flags of its own', () => {
    expect(nodeCommand('apps/api/src/main.js', [], { build: 'dist' })).toStrictEqual([
      join('dist', 'apps/api/src/main.js'),
    ]);
  });
});
