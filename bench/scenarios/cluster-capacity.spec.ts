import { capacity, unitCosts } from './cluster-capacity';
import type { PhaseCost } from './cluster-capacity';

/** A phase of `ms` on three masters. */
const phase = (
  ms: number,
  masters: [commands: number, cpuMs: number][],
  apiCpuMs = 0,
  dispatcherCpuMs = 0,
): PhaseCost => ({
  name: 'p',
  elapsedMs: ms,
  masters: masters.map(([commands, cpuMs], i) => ({ port: 7000 + i, commands, cpuMs })),
  apiCpuMs,
  dispatcherCpuMs,
});

describe('the cluster capacity model', () => {
  // 1,000 completions: 100,000 commands and 1,000 ms of Redis CPU (half on one master), 2,000 ms api, 1,500 ms dispatcher.
  const completions = phase(
    10_000,
    [
      [60_000, 500],
      [20_000, 250],
      [20_000, 250],
    ],
    2_000,
    1_500,
  );
  // 10,000 tokens: 40,000 commands, 500 ms of Redis CPU, 1,000 ms api, 800 ms dispatcher.
  const streams = phase(
    10_000,
    [
      [20_000, 200],
      [10_000, 150],
      [10_000, 150],
    ],
    1_000,
    800,
  );
  // No devices: 100 commands a second, 10 ms of dispatcher CPU a second.
  const none = phase(
    10_000,
    [
      [400, 0],
      [300, 0],
      [300, 0],
    ],
    0,
    100,
  );
  // 100 idle devices: 300 commands a second in all, 60 ms of dispatcher CPU a second.
  const idle = phase(
    10_000,
    [
      [1_200, 0],
      [900, 0],
      [900, 0],
    ],
    0,
    600,
  );
  const costs = unitCosts(completions, 1_000, streams, 10_000, none, idle, 100);

  it('turns each phase into costs per unit, the idle devices net of the background', () => {
    expect(costs.perCompletion).toEqual({ redis: 1, api: 2, dispatcher: 1.5, commands: 100 });
    expect(costs.per1000Tokens).toEqual({ redis: 50, api: 100, dispatcher: 80, commands: 4_000 });
    // (300 - 100) commands a second over 100 devices; their CPU at the completions' 0.01 ms per command.
    expect(costs.perDeviceSecond.commands).toBeCloseTo(2);
    expect(costs.perDeviceSecond.redis).toBeCloseTo(0.02);
    expect(costs.perDeviceSecond.dispatcher).toBeCloseTo(0.5);
    expect(costs.hotShare).toBeCloseTo(0.5);
  });

  it('sizes each load in processes at half a core each, and a dispatcher for every 10,000 devices at least', () => {
    const plan = capacity(costs);
    // 10,000/s × 1 ms of Redis = 10 s a second: 20 masters at 500 ms each.
    expect(plan.completions).toEqual({ masters: 20, apis: 40, dispatchers: 30 });
    // 1,000 thousands of tokens × 50 ms = 50 s a second.
    expect(plan.tokens).toEqual({ masters: 100, apis: 200, dispatchers: 160 });
    // 100,000 devices × 0.02 ms = 2 s a second of Redis; × 0.5 ms = 50 s of dispatcher, past the 10 that hold them.
    expect(plan.devices).toEqual({ masters: 4, apis: 0, dispatchers: 100 });
    // The queue's master does half of each completion's 1 ms: 500 ms a second at 1,000 completions/s.
    expect(plan.queueCeiling).toBeCloseTo(1_000);
  });

  it('never sizes a load at no process, and a silent phase costs nothing rather than dividing by zero', () => {
    const quiet = unitCosts(phase(1_000, [[0, 0]]), 0, phase(1_000, [[0, 0]]), 0, none, none, 10);
    expect(quiet.perDeviceSecond).toEqual({ redis: 0, dispatcher: 0, commands: 0 });
    const plan = capacity(quiet);
    expect(plan.completions).toEqual({ masters: 1, apis: 1, dispatchers: 1 });
    expect(plan.devices.dispatchers).toBe(10);
  });
});
