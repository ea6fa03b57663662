import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { originOf, summarizeProfile } from './profile';

/** A tiny call tree: root → handler → { parse, (garbage collector) }, plus (idle). */
function writeProfile(dir: string): string {
  const frame = (functionName: string, url = '', lineNumber = 0) => ({
    functionName,
    url,
    lineNumber,
    columnNumber: 0,
    scriptId: '0',
  });
  const profile = {
    nodes: [
      { id: 1, callFrame: frame('(root)'), children: [2, 5] },
      { id: 2, callFrame: frame('handler', 'file:///repo/dist/apps/api/src/x.js', 9), children: [3, 4] },
      { id: 3, callFrame: frame('parse', 'file:///repo/node_modules/@scope/pkg/index.js', 0), children: [] },
      { id: 4, callFrame: frame('(garbage collector)'), children: [] },
      { id: 5, callFrame: frame('(idle)'), children: [] },
    ],
    startTime: 1_000,
    endTime: 2_000,
    // Sample i lasts until sample i + 1: parse 300 µs, handler 100 µs, GC 100 µs, idle 500 µs.
    samples: [3, 3, 2, 4, 5, 5],
    timeDeltas: [0, 150, 150, 100, 100, 250, 250],
  };
  const file = join(dir, 'test.cpuprofile');
  writeFileSync(file, JSON.stringify(profile));
  return file;
}

describe('bench profile summary', () => {
  it('sums self time per function and leaves idle time out of the shares', () => {
    const dir = mkdtempSync(join(tmpdir(), 'bench-profile-'));
    try {
      const summary = summarizeProfile(writeProfile(dir), '/repo');
      expect(summary.totalMs).toBe(1);
      expect(summary.busyMs).toBe(0.5);
      expect(summary.top.map((f) => [f.frame, f.percent])).toEqual([
        ['parse node_modules/@scope/pkg/index.js:1', 60],
        ['handler dist/apps/api/src/x.js:10', 20],
        ['(garbage collector)', 20],
      ]);
      expect(summary.byOrigin.map((o) => o.origin)).toEqual(['@scope/pkg', 'switchyard', '(garbage collector)']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('counts only the samples inside a window when given one', () => {
    const dir = mkdtempSync(join(tmpdir(), 'bench-profile-'));
    try {
      // Sample times: 1000, 1150, 1300, 1400, 1500, 1750: keep 1300 and 1400 (handler, GC).
      const summary = summarizeProfile(writeProfile(dir), '/repo', { startUs: 1_250, endUs: 1_450 });
      expect(summary.top.map((f) => f.frame)).toEqual(['handler dist/apps/api/src/x.js:10', '(garbage collector)']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('names where code comes from', () => {
    expect(originOf('node:internal/streams/writable')).toBe('node:internal');
    expect(originOf('file:///w/node_modules/ioredis/built/Redis.js')).toBe('ioredis');
    expect(originOf('file:///w/node_modules/@prisma/client/runtime/client.js')).toBe('@prisma/client');
    expect(originOf('file:///w/dist/libs/common/src/index.js')).toBe('switchyard');
    expect(originOf('')).toBe('(v8/native)');
  });
});
