import type { Command } from 'commander';
import { ADMIN_USAGE_GROUPS, parseUsageQuery } from '@app/common/usage/usage-query';
import type { UsageReport } from '@app/common/usage/usage.service';
import type { Run } from '../runner';

/** A report's rows for a table: the percentiles as columns of their own. */
function flatRows(report: UsageReport) {
  return report.data.map(({ ttft_ms, duration_ms, ...row }) => {
    const ttft = ttft_ms as { p50: number | null; p95: number | null };
    const duration = duration_ms as { p50: number | null; p95: number | null };
    return {
      ...row,
      ttft_p50_ms: ttft.p50,
      ttft_p95_ms: ttft.p95,
      duration_p50_ms: duration.p50,
      duration_p95_ms: duration.p95,
    };
  });
}

/** `usage`: the admin's usage report, as GET /admin/usage answers it (a table, or with --json the same object). */
export function addUsageCommand(program: Command, run: Run): void {
  program
    .command('usage')
    .description('usage of one organization or all: requests, tokens, bytes and latency, grouped as asked')
    .option('--org <org-name>', 'only this organization (default: all)')
    .option('--from <date>', 'start, inclusive: 2026-11-01 or 2026-11-01T08:00:00Z (default: this month, UTC)')
    .option('--to <date>', 'end, exclusive (default: the start of next month, UTC)')
    .option('--by <groups>', `comma-separated: ${ADMIN_USAGE_GROUPS.join(', ')}`)
    .action((opts: { org?: string; from?: string; to?: string; by?: string }) =>
      run(
        async (s) => {
          const query = parseUsageQuery({ from: opts.from, to: opts.to, group_by: opts.by }, ADMIN_USAGE_GROUPS);
          const org = opts.org === undefined ? null : await (await s.admin()).orgs.byName(opts.org);
          return (await s.usage()).report(query, org?.id ?? null);
        },
        { human: (report) => flatRows(report as UsageReport) },
      ),
    );
}
