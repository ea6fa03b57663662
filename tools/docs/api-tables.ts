import { AUDIT_KINDS } from '@app/common/admin/audit-kinds';
import { markdownTable } from './generated-sections';

/** Every kind of audit entry (libs/common/src/admin/audit-kinds.ts) and what it holds, for docs/api.md. */
export function auditKindsTable(): string {
  const rows = Object.entries(AUDIT_KINDS).map(([kind, what]) => [`\`${kind}\``, what.replace(/\|/g, '\\|')]);
  return markdownTable(['kind', 'recorded when, and what it holds'], rows);
}
