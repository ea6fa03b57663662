import { z } from 'zod';

/**
 * The bodies of the admin API's requests, as the admin controller validates them (strict: an unknown
 * key is 400) and as the OpenAPI document describes them. Values are checked further by the admin
 * services, so that the CLI and the API refuse the same things.
 */
const limit = (what: string) =>
  z.number().int().nullable().optional().describe(`${what}: 1 to 1,000,000,000, or null to remove the limit`);

const allowedModels = z
  .array(z.string())
  .nullable()
  .describe('The only catalog models the device may serve (at least one); null: any model it may otherwise serve');

const networkModel = z
  .boolean()
  .describe(
    'Served by network devices too (default false: only by the direct devices of the organizations it is enabled for)',
  );

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
  weight: z
    .number()
    .int()
    .optional()
    .describe('Its share of a queue’s assignments when several organizations wait: 1 to 100 (default 1)'),
});
export const createKeyBody = z.strictObject({
  label: z.string().optional().describe('1-100 characters'),
  expires_in: z.string().optional().describe('Lifetime: a number followed by s, m, h or d (30d), at most 3650d'),
});
export const rotateKeyBody = z.strictObject({
  grace: z
    .string()
    .optional()
    .describe('How long the old key keeps working: 0, or a number followed by s, m, h or d; default 24h'),
});
export const addModelBody = z.strictObject({
  id: z.string().describe('1-200 characters: letters, digits and . _ : / @ + -'),
  max_output_tokens: z.number().int().optional().describe('Upper bound for max_tokens, 1 to 1,000,000'),
  owned_by: z.string().optional().describe('owned_by as /v1/models shows it (default switchyard)'),
  network: networkModel.optional(),
});
export const updateModelBody = z.strictObject({
  max_output_tokens: z
    .number()
    .int()
    .nullable()
    .optional()
    .describe('Upper bound for max_tokens, 1 to 1,000,000, or null to remove it'),
  owned_by: z.string().optional().describe('owned_by as /v1/models shows it'),
  network: networkModel.optional(),
});
export const createDeviceBody = z.strictObject({
  name: z.string().describe('1-64 characters'),
  org: z.string().optional().describe('The organization of a direct device; none registers a network device'),
  models: allowedModels.optional(),
});
export const updateDeviceBody = z.strictObject({
  models: allowedModels,
});
