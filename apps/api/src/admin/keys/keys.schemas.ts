import { z } from 'zod';
import { budget, listOf, named } from '../../openapi/components';

/*
 * The bodies the keys routes validate (strict: an unknown key is 400) and the answers they give. Values
 * are checked further by the admin services, so that the CLI and the API refuse the same things.
 */

export const createKeyBody = z.strictObject({
  label: z.string().optional().describe('1-100 characters'),
  expires_in: z.string().optional().describe('Lifetime: a number followed by s, m, h or d (30d), at most 3650d'),
});
export const keyBudgetBody = z.strictObject({
  monthly_token_budget: budget.describe(
    'The most tokens this key’s requests may use in a calendar month (UTC), within its organization’s: 0 to 1,000,000,000,000,000, or null for none of its own',
  ),
});
export const rotateKeyBody = z.strictObject({
  grace: z
    .string()
    .optional()
    .describe('How long the old key keeps working: 0, or a number followed by s, m, h or d; default 24h'),
});

const iso = z.iso.datetime({ offset: true });
const uuid = z.uuid();
const keyFields = {
  id: uuid,
  key: z.string().describe('The secret key: shown this once, stored only as its SHA-256.'),
  prefix: z.string(),
  org: z.string(),
  label: z.string().nullable(),
  created_at: iso,
  expires_at: iso.nullable(),
};

export const keyCreated = named('KeyCreated', 'A new API key, with its secret.', z.strictObject(keyFields));
export const keyRotated = named(
  'KeyRotated',
  'The key that replaces another (its secret shown once), and when the replaced key stops working.',
  z.strictObject({ ...keyFields, rotated_from: uuid, rotated_from_expires_at: iso }),
);
export const keyEntry = named(
  'KeyEntry',
  'An API key in the list (prefix only).',
  z.strictObject({
    id: uuid,
    prefix: z.string(),
    label: z.string().nullable(),
    status: z.enum(['active', 'expired', 'revoked']),
    created_at: iso,
    expires_at: iso.nullable(),
    revoked_at: iso.nullable(),
    last_used_at: iso.nullable(),
    rotated_from: uuid.nullable(),
    rotated_to: uuid.nullable(),
    monthly_token_budget: budget,
  }),
);
export const keyList = named('KeyList', 'An organization’s API keys, oldest first.', listOf(keyEntry));
export const keyRevoked = named(
  'KeyRevoked',
  'A revoked key (revoking again keeps the first time).',
  z.strictObject({ id: uuid, prefix: z.string(), revoked_at: iso }),
);
export const keyBudget = named(
  'KeyBudget',
  'A key after its monthly token budget was set.',
  z.strictObject({ id: uuid, prefix: z.string(), label: z.string().nullable(), monthly_token_budget: budget }),
);
