import { z } from 'zod';

/**
 * The bodies of the admin API's requests, as the admin controller validates them (strict: an unknown
 * key is 400) and as the OpenAPI document describes them. Values are checked further by the admin
 * services, so that the CLI and the API refuse the same things.
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
    .describe('Whether the organization’s prompts may go to the shared network (network devices); default true'),
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
});
export const createDeviceBody = z.strictObject({
  name: z.string().describe('1-64 characters'),
  org: z.string().optional().describe('The organization of a direct device; none registers a network device'),
  models: z
    .array(z.string())
    .nullable()
    .optional()
    .describe('The only catalog models the device may serve; null or left out: any it may otherwise serve'),
});
export const deviceModelsBody = z.strictObject({
  models: z
    .array(z.string())
    .nullable()
    .describe('The only catalog models the device may serve (1-1000), or null to lift the restriction'),
});
