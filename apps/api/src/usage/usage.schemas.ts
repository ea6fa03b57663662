import { z } from 'zod';
import { named } from '../openapi/components';
import { taskKind, taskStatus } from '../tasks/tasks.schemas';

const iso = z.iso.datetime({ offset: true });
const uuid = z.uuid();
const percentiles = z.strictObject({ p50: z.number().nullable(), p95: z.number().nullable() });

/** One row of a usage report. */
export const usageRow = named(
  'UsageRow',
  'One group: its fields (those named in group_by) and its counts.',
  z.strictObject({
    model: z.string().optional(),
    key: uuid.nullable().optional(),
    key_prefix: z.string().nullable().optional(),
    key_label: z.string().nullable().optional(),
    day: z.iso.date().optional(),
    hour: iso.optional(),
    mode: z.enum(['direct', 'network']).optional(),
    kind: taskKind.optional(),
    status: taskStatus.optional(),
    org: z.string().nullable().optional(),
    requests: z.number().int(),
    completed: z.number().int(),
    failed: z.number().int(),
    cancelled: z.number().int(),
    timed_out: z.number().int(),
    prompt_tokens: z.number().int(),
    completion_tokens: z.number().int(),
    output_bytes: z.number().int(),
    ttft_ms: percentiles,
    duration_ms: percentiles,
  }),
);

/** `GET /v1/usage` and `GET /admin/usage`. */
export const usageReport = named(
  'UsageReport',
  'A usage report over [from, to).',
  z.strictObject({
    object: z.literal('list'),
    from: iso,
    to: iso,
    group_by: z.array(z.enum(['model', 'key', 'day', 'hour', 'mode', 'kind', 'status', 'org'])),
    data: z.array(usageRow),
  }),
);

/** Where one monthly token budget stands this month. */
const budgetStanding = z
  .strictObject({
    monthly_token_budget: z.number().int(),
    used: z.number().int().describe('Tokens used this month, counted as tasks end'),
    remaining: z.number().int().describe('The budget less what was used, at least 0'),
  })
  .nullable();

/** `GET /v1/usage`: the report, and the caller's budgets this month. */
export const tenantUsageReport = named(
  'TenantUsageReport',
  'A usage report over [from, to), and where your organization’s and your key’s monthly token budgets stand this month (null: no budget).',
  z.strictObject({
    ...usageReport.shape,
    budgets: z.strictObject({
      month: z.string().describe('The month the budgets count (UTC), YYYY-MM'),
      resets_at: iso.describe('When the month ends and the budgets start again'),
      org: budgetStanding,
      key: budgetStanding,
    }),
  }),
);
