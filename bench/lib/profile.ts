import { readFileSync } from 'node:fs';
import { relative } from 'node:path';
import type { Window } from './context';

/** The parts of a V8 .cpuprofile (what `node --cpu-prof` writes) that a self-time summary needs. */
interface CpuProfile {
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number } }[];
  startTime: number;
  endTime: number;
  samples?: number[];
  timeDeltas?: number[];
}

export interface Frame {
  /** functionName (or "(anonymous)") and where it is: file:line, relative to the repository. */
  frame: string;
  selfMs: number;
  /** Share of the non-idle samples. */
  percent: number;
}

export interface ProfileSummary {
  file: string;
  /** Whether only the samples of the measured load were counted (else the whole process life). */
  window: boolean;
  /** The counted span, in seconds from the start of the profile. */
  fromS: number;
  toS: number;
  /** Sampled wall time, and the part of it that was not idle. */
  totalMs: number;
  busyMs: number;
  top: Frame[];
  /** Self time by where the code comes from: a package, node's internals, Switchyard, V8 (GC, program). */
  byOrigin: { origin: string; selfMs: number; percent: number }[];
}

/** node_modules/<pkg> (scoped or not), node:<module>, Switchyard's own code, or the runtime. */
export function originOf(url: string): string {
  if (url === '') {
    return '(v8/native)';
  }
  if (url.startsWith('node:')) {
    return 'node:' + url.slice(5).split('/')[0];
  }
  const modules = url.lastIndexOf('/node_modules/');
  if (modules >= 0) {
    const parts = url.slice(modules + '/node_modules/'.length).split('/');
    return parts[0].startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0];
  }
  if (/\/dist\/(apps|libs)\//.test(url)) {
    return 'switchyard';
  }
  return 'other';
}

/**
 * Self time per function, summed over every node of the call tree with the same function name and
 * location: sample i's time is timeDeltas[i + 1] (the gap to the next sample), as DevTools counts it.
 */
export function summarizeProfile(file: string, root: string, window?: Window, topN = 15): ProfileSummary {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const samples = profile.samples ?? [];
  const deltas = profile.timeDeltas ?? [];
  const selfUs = new Map<number, number>();
  let at = profile.startTime;
  for (let i = 0; i < samples.length; i++) {
    at += deltas[i] ?? 0;
    if (window && (at < window.startUs || at > window.endUs)) {
      continue;
    }
    const us = deltas[i + 1] ?? 0;
    selfUs.set(samples[i], (selfUs.get(samples[i]) ?? 0) + us);
  }
  const byFrame = new Map<string, number>();
  const byOrigin = new Map<string, number>();
  let total = 0;
  let idle = 0;
  for (const [id, us] of selfUs) {
    const node = byId.get(id);
    if (!node) {
      continue;
    }
    total += us;
    const { functionName, url, lineNumber } = node.callFrame;
    if (functionName === '(idle)') {
      idle += us;
      continue;
    }
    const where = url ? `${url.startsWith('file://') ? relative(root, url.slice(7)) : url}:${lineNumber + 1}` : '';
    const key = `${functionName || '(anonymous)'}${where ? ` ${where}` : ''}`;
    byFrame.set(key, (byFrame.get(key) ?? 0) + us);
    const origin = functionName.startsWith('(') && url === '' ? functionName : originOf(url);
    byOrigin.set(origin, (byOrigin.get(origin) ?? 0) + us);
  }
  const busy = total - idle;
  const pct = (us: number) => (busy > 0 ? Math.round((us / busy) * 1000) / 10 : 0);
  const ms = (us: number) => Math.round(us / 100) / 10;
  return {
    file: relative(root, file),
    window: window !== undefined,
    fromS: window ? Math.round((window.startUs - profile.startTime) / 1e5) / 10 : 0,
    toS:
      Math.round(((window ? Math.min(window.endUs, profile.endTime) : profile.endTime) - profile.startTime) / 1e5) / 10,
    totalMs: ms(total),
    busyMs: ms(busy),
    top: [...byFrame.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, topN)
      .map(([frame, us]) => ({ frame, selfMs: ms(us), percent: pct(us) })),
    byOrigin: [...byOrigin.entries()]
      .sort((a, b) => b[1] - a[1])
      .map(([origin, us]) => ({ origin, selfMs: ms(us), percent: pct(us) })),
  };
}
