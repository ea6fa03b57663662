import { z } from 'zod';
import { components } from './schemas';

/** Response schemas of the admin API (see schemas.ts). */
function named<T extends z.ZodType>(id: string, description: string, schema: T): T {
  components.add(schema, { id, description });
  return schema;
}
const iso = z.iso.datetime({ offset: true });
const uuid = z.uuid();
const list = <T extends z.ZodType>(item: T) => z.strictObject({ object: z.literal('list'), data: z.array(item) });
const limits = z.strictObject({
  rpm: z.number().int().nullable(),
  concurrency: z.number().int().nullable(),
  max_queued: z.number().int().nullable(),
});

export const org = named('Org', 'A new organization.', z.strictObject({ id: uuid, name: z.string(), created_at: iso }));
export const orgEntry = named(
  'OrgEntry',
  'An organization in the list: its limits and how many active keys, enabled models and own devices it has.',
  z.strictObject({
    id: uuid,
    name: z.string(),
    created_at: iso,
    limits,
    network: z.boolean().describe('Whether its prompts may go to the shared network'),
    active_keys: z.number().int(),
    models: z.number().int(),
    devices: z.number().int(),
  }),
);
export const orgList = named('OrgList', 'Every organization, by name.', list(orgEntry));
export const orgLimits = named(
  'OrgLimits',
  'An organization’s limits (null: unlimited) and network flag after the change.',
  z.strictObject({ id: uuid, name: z.string(), limits, network: z.boolean() }),
);

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
  }),
);
export const keyList = named('KeyList', 'An organization’s API keys, oldest first.', list(keyEntry));
export const keyRevoked = named(
  'KeyRevoked',
  'A revoked key (revoking again keeps the first time).',
  z.strictObject({ id: uuid, prefix: z.string(), revoked_at: iso }),
);

const modelFields = {
  id: z.string(),
  max_output_tokens: z.number().int().nullable(),
  owned_by: z.string(),
  created_at: iso,
};
export const adminModel = named('CatalogModel', 'A catalog model.', z.strictObject(modelFields));
export const adminModelList = named(
  'CatalogModelList',
  'The catalog, with the organizations each model is enabled for.',
  list(z.strictObject({ ...modelFields, enabled_for: z.array(z.string()) })),
);
export const enablement = named(
  'ModelEnablement',
  'Whether a model is now enabled for an organization.',
  z.strictObject({ model: z.string(), org: z.string(), enabled: z.boolean() }),
);

const pool = z.enum(['direct', 'network']);
const deviceModels = z
  .array(z.string())
  .nullable()
  .describe('The only models the device may serve; null: any it may otherwise serve');
export const deviceCreated = named(
  'DeviceCreated',
  'A registered device, with its token (shown this once).',
  z.strictObject({
    id: uuid,
    token: z.string(),
    name: z.string(),
    org: z.string().nullable(),
    pool,
    models: deviceModels,
    created_at: iso,
  }),
);
export const deviceModelsSet = named(
  'DeviceModels',
  'A device’s list of the models it may serve after the change.',
  z.strictObject({ id: uuid, name: z.string(), models: deviceModels }),
);
export const deviceList = named(
  'DeviceList',
  'Every device.',
  list(
    z.strictObject({
      id: uuid,
      name: z.string(),
      org: z.string().nullable(),
      pool,
      token_prefix: z.string(),
      models: deviceModels,
      status: z.enum(['active', 'revoked']),
      created_at: iso,
      last_seen_at: iso.nullable(),
      revoked_at: iso.nullable(),
    }),
  ),
);
export const deviceRevoked = named(
  'DeviceRevoked',
  'A revoked device.',
  z.strictObject({ id: uuid, name: z.string(), revoked_at: iso }),
);
