import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import * as prettier from 'prettier';
import type { BenchOptions, ScenarioResult, TargetCheck } from './context';
import { mdTable, num, passText } from './format';
import type { MachineInfo } from './procfs';
import type { ProfileSummary } from './profile';
import { ROOT } from './stack';

export const RESULTS_START = '<!-- bench:results:start -->';
export const RESULTS_END = '<!-- bench:results:end -->';
export const USAGE_START = '<!-- bench:usage:start -->';
export const USAGE_END = '<!-- bench:usage:end -->';
export const CLUSTER_START = '<!-- bench:cluster:start -->';
export const CLUSTER_END = '<!-- bench:cluster:end -->';
export const RESUME_START = '<!-- bench:resume:start -->';
export const RESUME_END = '<!-- bench:resume:end -->';
export const EMBEDDINGS_START = '<!-- bench:embeddings:start -->';
export const EMBEDDINGS_END = '<!-- bench:embeddings:end -->';
export const BUDGETS_START = '<!-- bench:budgets:start -->';
export const BUDGETS_END = '<!-- bench:budgets:end -->';
export const RETENTION_START = '<!-- bench:retention:start -->';
export const RETENTION_END = '<!-- bench:retention:end -->';

export interface RunReport {
  date: string;
  commit: string;
  machine: MachineInfo;
  options: BenchOptions;
  durationS: number;
  /** The load average when the run ended: with the one at the start, how busy the machine was. */
  loadAverageEnd: number[];
  scenarios: ScenarioResult[];
  failures: { scenario: string; error: string }[];
  profiles: Record<string, { api?: ProfileSummary; dispatcher?: ProfileSummary }>;
}

/** The commit the run measured, marked when the working tree had changes. */
export function currentCommit(): string {
  try {
    const head = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT, encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--untracked-files=no'], {
      cwd: ROOT,
      encoding: 'utf8',
    });
    return dirty.trim() ? `${head}+changes` : head;
  } catch {
    return 'unknown';
  }
}

export function machineLine(m: MachineInfo): string {
  return (
    `${m.cores} × ${m.cpuModel}, ${m.memoryGiB} GiB memory, Node ${m.node}, ${m.os}; ` +
    `load average at start ${m.loadAverage.map((l) => l.toFixed(2)).join(' / ')}`
  );
}

function targetsTable(targets: TargetCheck[]): string {
  return mdTable(
    ['target', 'goal', 'measured', 'result'],
    targets.map((t) => [t.target, t.goal, t.measured, passText(t.pass, t.floorMisses)]),
  );
}

function profileTable(summary: ProfileSummary): string {
  return mdTable(
    ['self ms', '%', 'function (dist file:line)'],
    summary.top.map((f) => [num(f.selfMs, 0), num(f.percent, 1), `\`${f.frame}\``]),
    ['r', 'r', 'l'],
  );
}

function originLine(summary: ProfileSummary): string {
  return summary.byOrigin
    .slice(0, 10)
    .map((o) => `${o.origin} ${num(o.percent, 1)} %`)
    .join(', ');
}

/**
 * Scenarios that count requests or runs, not seconds, or measure windows of their own length (budgets):
 * `--duration` does not apply to them.
 */
const STEPLESS = new Set(['usage', 'resume', 'embeddings', 'budgets', 'retention']);

/** The whole report as Markdown (headings from level `level`). */
export function renderReport(report: RunReport, level = 2): string {
  const h = (n: number) => '#'.repeat(level + n);
  const parts: string[] = [];
  parts.push(`${h(0)} Results of ${report.date.slice(0, 10)}`);
  parts.push(
    [
      `- **Machine:** ${machineLine(report.machine)}`,
      `- **Commit:** ${report.commit}; run took ${Math.round(report.durationS)} s; load average at the end ` +
        `${report.loadAverageEnd.map((l) => l.toFixed(2)).join(' / ')}` +
        (report.options.quick ? ' (`--quick`: tiny sizes, a smoke test, not a measurement)' : ''),
      `- **Scenarios:** ${report.options.scenarios.join(', ')}` +
        (report.options.scenarios.some((s) => !STEPLESS.has(s))
          ? `; ${report.options.durationS} s per step after ${report.options.warmupS} s of warm-up`
          : '') +
        (report.options.scenarios.includes('embeddings')
          ? `; ${report.options.embedRuns} timed embeddings requests per leg and encoding after a warm-up one`
          : '') +
        (report.options.scenarios.includes('budgets')
          ? `; budgets: ${report.options.budgetsRounds} rounds of a ${report.options.budgetsWindowS} s window without and one with ` +
            `budgets at ${report.options.budgetsRate}/s, after ${report.options.warmupS} s of warm-up each way`
          : '') +
        (report.options.scenarios.includes('retention')
          ? `; retention: ${report.options.retentionRounds} rounds of a ${report.options.retentionWindowS} s window without and one with ` +
            `the deletion (and one without at the end) at ${report.options.retentionRate}/s`
          : '') +
        (report.options.cpuProf ? '; api and dispatcher ran under `--cpu-prof`, which slows them' : ''),
      `- Postgres and Redis are the machine's shared servers, so other users of the machine add to their CPU time and to "other".`,
    ].join('\n'),
  );
  const targets = report.scenarios.flatMap((s) => s.targets);
  if (targets.length) {
    parts.push(`${h(1)} Targets`);
    parts.push(targetsTable(targets));
  }
  for (const failure of report.failures) {
    parts.push(`${h(1)} ${failure.scenario}: failed`);
    parts.push('```\n' + failure.error.slice(0, 2000) + '\n```');
  }
  for (const s of report.scenarios) {
    parts.push(`${h(1)} ${s.title}`);
    parts.push(s.table);
    if (s.notes.length) {
      parts.push(s.notes.map((n) => `- ${n}`).join('\n'));
    }
    const profiles = report.profiles[s.name];
    for (const which of ['api', 'dispatcher'] as const) {
      const summary = profiles?.[which];
      if (summary) {
        parts.push(
          `${h(2)} ${s.name}: ${which} CPU profile, top self time\n\n` +
            `${num(summary.busyMs / 1000, 1)} s busy of ${num(summary.totalMs / 1000, 1)} s sampled ` +
            `${summary.window ? 'under the measured load (warm-up and start-up left out)' : 'over the whole process'} (\`${summary.file}\`). ` +
            `By origin: ${originLine(summary)}.`,
        );
        parts.push(profileTable(summary));
      }
    }
  }
  return parts.join('\n\n') + '\n';
}

async function pretty(text: string, file: string, parser: 'markdown' | 'json'): Promise<string> {
  const config = (await prettier.resolveConfig(file)) ?? {};
  return prettier.format(text, { ...config, parser, filepath: file });
}

export async function writeJson(file: string, value: unknown): Promise<void> {
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, await pretty(JSON.stringify(value), file, 'json'));
}

const DOC_HEADER = `# Benchmarks

See the sections above the results for how to run the benchmark and what each scenario measures.

`;

/** Scenarios whose results have a section of their own in docs/benchmarks.md. */
const OWN_SECTION = new Set(['usage', 'cluster', 'resume', 'embeddings', 'budgets', 'retention']);

/**
 * The results sections of docs/benchmarks.md: the usage queries, the cluster, resume, embeddings and budgets have a
 * section of their own, so that a run of one kind (`--scenarios usage`, or the relay scenarios alone) never replaces
 * the other's numbers.
 */
const SECTIONS = [
  {
    start: RESULTS_START,
    end: RESULTS_END,
    level: 2,
    has: (name: string) => !OWN_SECTION.has(name),
  },
  { start: USAGE_START, end: USAGE_END, level: 3, has: (name: string) => name === 'usage' },
  { start: CLUSTER_START, end: CLUSTER_END, level: 3, has: (name: string) => name === 'cluster' },
  { start: RESUME_START, end: RESUME_END, level: 3, has: (name: string) => name === 'resume' },
  { start: EMBEDDINGS_START, end: EMBEDDINGS_END, level: 3, has: (name: string) => name === 'embeddings' },
  { start: BUDGETS_START, end: BUDGETS_END, level: 3, has: (name: string) => name === 'budgets' },
  { start: RETENTION_START, end: RETENTION_END, level: 3, has: (name: string) => name === 'retention' },
];

/** Rewrites the results sections of docs/benchmarks.md that this run measured, leaving the rest as it is. */
export async function writeDocs(report: RunReport): Promise<string> {
  const file = join(ROOT, 'docs', 'benchmarks.md');
  let next = existsSync(file) ? readFileSync(file, 'utf8') : `${DOC_HEADER}${RESULTS_START}\n${RESULTS_END}\n`;
  for (const section of SECTIONS) {
    const names = report.options.scenarios.filter(section.has);
    if (names.length === 0) {
      continue;
    }
    const part: RunReport = {
      ...report,
      options: { ...report.options, scenarios: names },
      scenarios: report.scenarios.filter((s) => section.has(s.name)),
      failures: report.failures.filter((f) => section.has(f.scenario)),
    };
    const start = next.indexOf(section.start);
    const end = next.indexOf(section.end);
    const text = `${section.start}\n\n${renderReport(part, section.level)}\n${section.end}`;
    next =
      start >= 0 && end > start
        ? next.slice(0, start) + text + next.slice(end + section.end.length)
        : `${next.trimEnd()}\n\n${text}\n`;
  }
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, await pretty(next, file, 'markdown'));
  return file;
}
