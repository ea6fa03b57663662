import { Coalescer } from './coalescer';

const tick = (ms = 0) => new Promise((r) => setTimeout(r, ms));

describe('Coalescer', () => {
  it('sends what one turn submits as one batch, and what arrives during a batch as the next', async () => {
    const batches: number[][] = [];
    let release!: () => void;
    const c = new Coalescer<number, number>(async (items) => {
      batches.push(items);
      if (batches.length === 1) {
        await new Promise<void>((r) => (release = r));
      }
      return items.map((n) => n * 10);
    }, 1);
    const first = [1, 2, 3].map((n) => c.submit(n));
    while (batches.length === 0) {
      await tick(1);
    }
    const second = [4, 5].map((n) => c.submit(n));
    await tick(5);
    expect(batches).toEqual([[1, 2, 3]]);
    release();
    expect(await Promise.all([...first, ...second])).toEqual([10, 20, 30, 40, 50]);
    expect(batches).toEqual([
      [1, 2, 3],
      [4, 5],
    ]);
    expect(c.pending).toBe(0);
  });

  it('an Error result rejects its item alone; a throw rejects the whole batch', async () => {
    const c = new Coalescer<string, string>(async (items) => {
      if (items.includes('boom')) {
        throw new Error('batch failed');
      }
      return items.map((s) => (s === 'bad' ? new Error(`no ${s}`) : s.toUpperCase()));
    }, 0);
    const results = await Promise.allSettled([c.submit('a'), c.submit('bad'), c.submit('b')]);
    expect(results.map((r) => (r.status === 'fulfilled' ? r.value : (r.reason as Error).message))).toEqual([
      'A',
      'no bad',
      'B',
    ]);
    const failed = await Promise.allSettled([c.submit('x'), c.submit('boom')]);
    expect(failed.map((r) => r.status === 'rejected' && (r.reason as Error).message)).toEqual([
      'batch failed',
      'batch failed',
    ]);
    // it goes on after a failed batch
    expect(await c.submit('after')).toBe('AFTER');
  });

  it('splits more than maxBatch items over several batches, in order', async () => {
    const batches: number[][] = [];
    const c = new Coalescer<number, number>(
      async (items) => {
        batches.push(items);
        return items;
      },
      0,
      2,
    );
    expect(await Promise.all([1, 2, 3, 4, 5].map((n) => c.submit(n)))).toEqual([1, 2, 3, 4, 5]);
    expect(batches).toEqual([[1, 2], [3, 4], [5]]);
  });
});
