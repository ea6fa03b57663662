import { z } from 'zod';
// By path, not '@app/common': the dashboard's compiler reads these schemas without the alias.
import { OrgCompat } from '../../../../../libs/common/src/prisma/generated/enums';
import { budget, listOf, named } from '../../openapi/components';

/*
 * The bodies the orgs routes validate (strict: an unknown key is 400) and the answers they give. Values
 * are checked further by the admin services, so that the CLI and the API refuse the same things.
 */

const limit = (what: string) =>
  z.number().int().nullable().optional().describe(`${what}: 1 to 1,000,000,000, or null to remove the limit`);

export const createOrgBody = z.strictObject({
  name: z.string().describe('1-64 letters, digits, ".", "_" or "-", starting with a letter or digit'),
});
export const limitsBody = z.strictObject({
  rpm: limit('Requests per minute'),
  concurrency: limit('Requests at once'),
  max_queued: limit('Queued requests per model'),
  network: z
    .boolean()
    .optional()
    .describe('false keeps the organization’s prompts off the shared network (mode network then gets 403)'),
  resume: z
    .boolean()
    .optional()
    .describe(
      'false keeps one device per answer: a streamed task whose device is lost after output reached the client ends with device_disconnected instead of continuing on another device (default true)',
    ),
  compat: z
    .enum(OrgCompat)
    .optional()
    .describe(
      'Which rules the OpenAI routes follow where OpenAI and the Nodea specification differ: openai (the default) or nodea (the stop text included in the output; with n > 1, usage counts one choice)',
    ),
  weight: z
    .number()
    .int()
    .optional()
    .describe('Its share of a queue’s assignments when several organizations wait: 1 to 100 (default 1)'),
  monthly_token_budget: budget.optional(),
});

const iso = z.iso.datetime({ offset: true });
const uuid = z.uuid();
const limits = z.strictObject({
  rpm: z.number().int().nullable(),
  concurrency: z.number().int().nullable(),
  max_queued: z.number().int().nullable(),
});

export const newOrg = named(
  'Org',
  'A new organization.',
  z.strictObject({ id: uuid, name: z.string(), created_at: iso }),
);
export const orgEntry = named(
  'OrgEntry',
  'An organization in the list: its limits and how many active keys, enabled models and own devices it has.',
  z.strictObject({
    id: uuid,
    name: z.string(),
    created_at: iso,
    limits,
    network: z.boolean(),
    resume: z.boolean(),
    compat: z.enum(OrgCompat),
    weight: z.number().int(),
    monthly_token_budget: budget,
    active_keys: z.number().int(),
    models: z.number().int(),
    devices: z.number().int(),
  }),
);
export const orgList = named('OrgList', 'Every organization, by name.', listOf(orgEntry));
export const orgLimits = named(
  'OrgLimits',
  'An organization’s settings after the change: limits (null: unlimited), network and resume switches, compat, weight, monthly token budget.',
  z.strictObject({
    id: uuid,
    name: z.string(),
    limits,
    network: z.boolean(),
    resume: z.boolean(),
    compat: z.enum(OrgCompat),
    weight: z.number().int(),
    monthly_token_budget: budget,
  }),
);
