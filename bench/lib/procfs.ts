import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';

/** Clock ticks per second of /proc's CPU times (almost always 100). */
export const CLK_TCK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

/** User + system CPU time of a process in milliseconds, or null once it is gone. */
export function cpuMs(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces and parentheses: count fields after the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLK_TCK;
  } catch {
    return null;
  }
}

/** Resident memory of a process in bytes (VmRSS), or null once it is gone. */
export function rssBytes(pid: number): number | null {
  try {
    const match = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return match ? Number(match[1]) * 1024 : null;
  } catch {
    return null;
  }
}

/** Busy and total CPU time of the whole machine (all cores), in milliseconds. */
export function machineCpuMs(): { busy: number; total: number } {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0];
  const values = line.trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal (guest time is already inside user).
  const total = values.slice(0, 8).reduce((a, b) => a + b, 0);
  const idle = values[3] + (values[4] ?? 0);
  return { busy: ((total - idle) * 1000) / CLK_TCK, total: (total * 1000) / CLK_TCK };
}

/** A group of processes whose CPU time is summed (a set of agents, Postgres backends). */
export interface CpuGroup {
  name: string;
  /** The pids now; asked at each sample, because Postgres backends come and go. */
  pids(): Promise<number[]> | number[];
}

export type CpuSample = Map<string, Map<number, number>>;

export async function sampleCpu(groups: CpuGroup[]): Promise<CpuSample> {
  const out: CpuSample = new Map();
  for (const group of groups) {
    const byPid = new Map<number, number>();
    for (const pid of await group.pids()) {
      const ms = cpuMs(pid);
      if (ms !== null) {
        byPid.set(pid, ms);
      }
    }
    out.set(group.name, byPid);
  }
  return out;
}

/**
 * CPU milliseconds each group used between two samples. A pid that appeared in between counts from
 * zero (a new Postgres connection); one that exited in between is lost (its time cannot be read).
 */
export function cpuDelta(before: CpuSample, after: CpuSample): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [name, pids] of after) {
    let sum = 0;
    const earlier = before.get(name) ?? new Map<number, number>();
    for (const [pid, ms] of pids) {
      sum += ms - (earlier.get(pid) ?? 0);
    }
    out[name] = sum;
  }
  return out;
}

/** The machine a run was on, for the report. */
export interface MachineInfo {
  cpuModel: string;
  cores: number;
  memoryGiB: number;
  node: string;
  os: string;
  loadAverage: number[];
}

export function machineInfo(): MachineInfo {
  let os: string = process.platform;
  try {
    const release = readFileSync('/etc/os-release', 'utf8');
    os = /^PRETTY_NAME="?([^"\n]*)"?/m.exec(release)?.[1] ?? os;
  } catch {
    // not Linux, or no os-release
  }
  let kernel = '';
  try {
    kernel = readFileSync('/proc/sys/kernel/osrelease', 'utf8').trim();
  } catch {
    // not Linux
  }
  const load = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).map(Number);
  return {
    cpuModel: cpus()[0]?.model.trim() ?? 'unknown',
    cores: cpus().length,
    memoryGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
    node: process.version,
    os: kernel ? `${os}, Linux ${kernel}` : os,
    loadAverage: load,
  };
}
