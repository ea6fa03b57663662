import type { Command } from 'commander';
import { auditChangeLines } from '@app/common/admin/audit-diff';
import { AUDIT_FAMILIES, AUDIT_PAGE_DEFAULT, AUDIT_PAGE_MAX } from '@app/common/admin/audit-kinds';
import type { AuditPage } from '@app/common/admin/audit.service';
import type { Run } from '../runner';

/** An entry per row; what changed in one cell (`field: before → after`), or what was created or removed. */
function auditTable(result: unknown) {
  return (result as AuditPage).data.map((e) => ({
    id: e.id,
    at: e.at,
    via: e.via,
    actor: e.actor,
    kind: e.kind,
    target: e.target,
    changes:
      e.before === null ? 'created' : e.after === null ? 'removed' : auditChangeLines(e.before, e.after).join('; '),
  }));
}

/** `audit`: the audit log of admin changes, as GET /admin/audit answers it (a table, or with --json the page). */
export function addAuditCommand(program: Command, run: Run): void {
  program
    .command('audit')
    .description(
      'the audit log of admin changes, newest first: who changed what, and through what (api, dashboard, cli)',
    )
    .option('--since <time>', 'only changes at or after: 2026-12-01 (UTC midnight) or 2026-12-01T08:00:00Z')
    .option('--kind <kind>', `only this kind (org.update, key.revoke, …) or family (${AUDIT_FAMILIES.join(', ')})`)
    .option('--limit <n>', `entries per page, 1 to ${AUDIT_PAGE_MAX} (default ${AUDIT_PAGE_DEFAULT})`)
    .option('--after <id>', 'the next page: the entries older than this id (the last one a page printed)')
    .action((opts: { since?: string; kind?: string; limit?: string; after?: string }) =>
      run(
        async (s) => {
          // Loaded when the command runs (zod and the errors): `--help` loads nothing of it.
          const { parseAuditQuery } = await import('@app/common/admin/audit.service');
          return (await s.admin()).audit.list(parseAuditQuery(opts));
        },
        {
          human: auditTable,
          note: (result) => {
            const page = result as AuditPage;
            return page.has_more ? `More: --after ${page.last_id}` : undefined;
          },
        },
      ),
    );
}
