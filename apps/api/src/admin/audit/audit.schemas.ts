import { z } from 'zod';
// By path, not '@app/common': the dashboard's compiler reads these schemas without the alias.
import {
  AUDIT_FAMILIES,
  AUDIT_KIND_NAMES,
  AUDIT_PAGE_DEFAULT,
  AUDIT_PAGE_MAX,
} from '../../../../../libs/common/src/admin/audit-kinds';
import { AuditVia } from '../../../../../libs/common/src/prisma/generated/enums';
import { named } from '../../openapi/components';

/*
 * The query string of `GET /admin/audit` and its answer. The values are checked by the admin service
 * (parseAuditQuery), so that the CLI's `audit` refuses the same things.
 */

export const auditQueryParams = z.strictObject({
  since: z
    .string()
    .optional()
    .describe(
      'Only entries at or after this time: YYYY-MM-DD (UTC midnight) or an ISO 8601 date-time with Z or an offset',
    ),
  kind: z
    .string()
    .optional()
    .describe(
      `Only entries of this kind (${AUDIT_KIND_NAMES.join(', ')}), or of this family (${AUDIT_FAMILIES.join(', ')})`,
    ),
  limit: z.string().optional().describe(`Entries per page: 1 to ${AUDIT_PAGE_MAX} (default ${AUDIT_PAGE_DEFAULT})`),
  after: z.string().optional().describe('The previous page’s `last_id`: the page of the entries older than it'),
});

const values = z
  .record(z.string(), z.unknown())
  .nullable()
  .describe('The object’s fields, as its table holds them, secrets (key hashes, tokens) left out');

export const auditEntry = named(
  'AuditEntry',
  'One admin change: when, by whom, through what, what it was, and the object before and after it.',
  z.strictObject({
    id: z.string().describe('Ascending with every entry'),
    at: z.iso.datetime({ offset: true }),
    actor: z
      .string()
      .describe(
        'Who, never with a secret: `admin-token:<fingerprint>`, `dashboard:<session fingerprint>` or `cli:<user>@<host>`',
      ),
    via: z.enum(AuditVia),
    kind: z.string().describe(`What was done: ${AUDIT_KIND_NAMES.join(', ')}`),
    target: z
      .string()
      .describe(
        'What it was done to: an organization’s name, a model’s id, `<org>/<model>` for enabling and disabling, a key’s, device’s or canary’s id',
      ),
    before: values.describe('The object before the change; null for a creation'),
    after: values.describe('The object after the change; null for a removal'),
  }),
);

export const auditPage = named(
  'AuditPage',
  'A page of the audit log, newest first; `after=<last_id>` asks for the next one while `has_more` is true.',
  z.strictObject({
    object: z.literal('list'),
    data: z.array(auditEntry),
    first_id: z.string().nullable(),
    last_id: z.string().nullable(),
    has_more: z.boolean(),
  }),
);
