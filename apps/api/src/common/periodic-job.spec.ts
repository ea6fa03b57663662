import { PeriodicJob, untilOrAfter } from './periodic-job';

/** A run that waits until released, and records when it started and ended. */
function gatedRuns() {
  const log: string[] = [];
  const gates: (() => void)[] = [];
  let n = 0;
  const work = () => {
    const i = ++n;
    log.push(`start ${i}`);
    return new Promise<void>((resolve) =>
      gates.push(() => {
        log.push(`end ${i}`);
        resolve();
      }),
    );
  };
  return { log, work, release: () => gates.shift()?.() };
}

const turn = () => new Promise((r) => setImmediate(r));

describe('PeriodicJob', () => {
  afterEach(() => jest.useRealTimers());

  it('runs one at a time: a run asked for during another starts when it ends', async () => {
    const { log, work, release } = gatedRuns();
    const job = new PeriodicJob(work, { everyMs: 60_000 });
    const first = job.run();
    const second = job.run();
    await turn();
    expect(log).toEqual(['start 1']);
    release();
    await first;
    await turn();
    expect(log).toEqual(['start 1', 'end 1', 'start 2']);
    release();
    await second;
    expect(log).toEqual(['start 1', 'end 1', 'start 2', 'end 2']);
  });

  it('runs other work on the same line, in order with its own', async () => {
    const order: string[] = [];
    const job = new PeriodicJob(async () => void order.push('own'), { everyMs: 60_000 });
    await Promise.all([job.run(), job.run(async () => void order.push('other')), job.run()]);
    expect(order).toEqual(['own', 'other', 'own']);
  });

  it('runs every everyMs, and once firstAfterMs after start; stop ends the runs', async () => {
    jest.useFakeTimers();
    let runs = 0;
    const job = new PeriodicJob(async () => void runs++, { everyMs: 1_000, firstAfterMs: 100 });
    job.start();
    await jest.advanceTimersByTimeAsync(99);
    expect(runs).toBe(0);
    await jest.advanceTimersByTimeAsync(1);
    expect(runs).toBe(1);
    await jest.advanceTimersByTimeAsync(2_000);
    expect(runs).toBe(3);
    await job.stop();
    expect(job.stopping).toBe(true);
    await jest.advanceTimersByTimeAsync(5_000);
    expect(runs).toBe(3);
  });

  it('a run whose error escapes does not stop the runs after it', async () => {
    let runs = 0;
    const job = new PeriodicJob(
      async () => {
        runs++;
        throw new Error('boom');
      },
      { everyMs: 60_000 },
    );
    await job.run();
    await job.run();
    expect(runs).toBe(2);
  });

  it('stop waits for the run in progress, at most stopWaitMs; lastRun runs the work once more', async () => {
    const { log, work, release } = gatedRuns();
    const job = new PeriodicJob(work, { everyMs: 60_000, stopWaitMs: 50 });
    void job.run();
    const started = Date.now();
    await job.stop({ lastRun: true });
    // Gave up waiting: the first run is still held.
    expect(Date.now() - started).toBeGreaterThanOrEqual(45);
    expect(log).toEqual(['start 1']);
    release();
    await turn();
    expect(log).toEqual(['start 1', 'end 1', 'start 2']);
    release();

    const unbounded = new PeriodicJob(work, { everyMs: 60_000 });
    void unbounded.run();
    let stopped = false;
    const stopping = unbounded.stop().then(() => (stopped = true));
    await turn();
    expect(stopped).toBe(false);
    release();
    await stopping;
    expect(stopped).toBe(true);
  });

  it('untilOrAfter resolves with the promise, or after ms', async () => {
    await expect(untilOrAfter(Promise.resolve(1), 10_000)).resolves.toBeUndefined();
    await expect(untilOrAfter(new Promise(() => undefined), 10)).resolves.toBeUndefined();
  });
});
