import { cpuDelta, machineCpuMs, sampleCpu } from './procfs';
import type { CpuGroup } from './procfs';

/** CPU used over a window, per group and by the rest of the machine, in % of one core. */
export interface CpuWindow {
  perS: Record<string, number>;
  /** Share of all cores busy, 0–1. */
  machineBusy: number;
}

/** Runs `work` and measures the CPU each group (and everything else on the machine) used meanwhile. */
export async function measureCpu<T>(
  groups: CpuGroup[],
  work: () => Promise<T>,
): Promise<{ result: T; cpu: CpuWindow }> {
  const before = await sampleCpu(groups);
  const machineBefore = machineCpuMs();
  const t0 = performance.now();
  const result = await work();
  const seconds = (performance.now() - t0) / 1000;
  const after = await sampleCpu(groups);
  const machineAfter = machineCpuMs();
  const used = cpuDelta(before, after);
  const busy = machineAfter.busy - machineBefore.busy;
  const ours = Object.values(used).reduce((a, b) => a + b, 0);
  const perS: Record<string, number> = {};
  for (const [name, ms] of Object.entries(used)) {
    perS[name] = ms / seconds / 10; // ms per s → % of a core
  }
  perS.other = Math.max(0, busy - ours) / seconds / 10;
  return { result, cpu: { perS, machineBusy: busy / (machineAfter.total - machineBefore.total) } };
}

/** `api 12 %, dispatcher 40 %, …` (of one core). */
export function cpuLine(cpu: CpuWindow): string {
  return (
    Object.entries(cpu.perS)
      .map(([name, pct]) => `${name} ${Math.round(pct)} %`)
      .join(', ') + `; machine ${Math.round(cpu.machineBusy * 100)} % busy`
  );
}
