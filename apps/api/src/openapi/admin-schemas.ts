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
    network: z.boolean(),
    weight: z.number().int(),
    active_keys: z.number().int(),
    models: z.number().int(),
    devices: z.number().int(),
  }),
);
export const orgList = named('OrgList', 'Every organization, by name.', list(orgEntry));
export const orgLimits = named(
  'OrgLimits',
  'An organization’s settings after the change: limits (null: unlimited), network switch, weight.',
  z.strictObject({ id: uuid, name: z.string(), limits, network: z.boolean(), weight: z.number().int() }),
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
  network: z.boolean().describe('Served by network devices too; false: only by the direct devices of its orgs'),
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
const allowedModels = z
  .array(z.string())
  .nullable()
  .describe('The models an admin restricted the device to; null: any model it may otherwise serve');
export const deviceCreated = named(
  'DeviceCreated',
  'A registered device, with its token (shown this once).',
  z.strictObject({
    id: uuid,
    token: z.string(),
    name: z.string(),
    org: z.string().nullable(),
    pool,
    allowed_models: allowedModels,
    created_at: iso,
  }),
);
export const device = named(
  'Device',
  'A device: its registration, the models it may serve, and its live state (what its dispatcher reports now).',
  z.strictObject({
    id: uuid,
    name: z.string(),
    org: z.string().nullable(),
    pool,
    token_prefix: z.string(),
    status: z.enum(['active', 'revoked']),
    allowed_models: allowedModels,
    created_at: iso,
    last_seen_at: iso.nullable().describe('When it last connected to a dispatcher'),
    revoked_at: iso.nullable(),
    online: z.boolean().describe('Connected to a dispatcher now'),
    connected_at: iso.nullable().describe('When its current connection began; null when offline'),
    last_heartbeat_at: iso.nullable().describe('Its last sign of life, renewed every 5 s while connected'),
    dispatcher: z.string().nullable().describe('The dispatcher instance it is connected to'),
    models: z.array(z.string()).describe('The announced models it was accepted for (serves); empty when offline'),
    features: z.array(z.string()).describe('The features its backend supports, as announced'),
    available: z.boolean().nullable().describe('False while its runtime is unreachable; null when offline'),
    task: z.string().nullable().describe('The task address it is serving, or null'),
  }),
);
export const deviceList = named('DeviceList', 'Every device, oldest first.', list(device));
export const deviceRevoked = named(
  'DeviceRevoked',
  'A revoked device.',
  z.strictObject({ id: uuid, name: z.string(), revoked_at: iso }),
);

const waitMs = z.number().int().nullable().describe('Age of the oldest waiting job in ms; null when none waits');
export const queueList = named(
  'QueueList',
  'Every (model, pool) queue with devices online or jobs waiting, by queue name.',
  list(
    z.strictObject({
      queue: z.string().describe('The queue’s name in Redis'),
      model: z.string(),
      pool,
      org: z.string().nullable().describe('The organization of a direct pool; null for the network'),
      waiting: z.number().int(),
      oldest_wait_ms: waitMs,
      devices_online: z.number().int().describe('Devices online serving this queue'),
      devices_busy: z.number().int().describe('Of those, the ones serving a task now'),
      lines: z
        .array(
          z.strictObject({
            org: z.string().nullable(),
            org_id: uuid,
            waiting: z.number().int(),
            oldest_wait_ms: waitMs,
          }),
        )
        .describe('Each organization with jobs waiting, in its own line; organizations are served in turn by weight'),
    }),
  ),
);

const msOrNull = z.number().int().nullable();
export const traffic = named(
  'Traffic',
  'The last hour of traffic by minute (minutes without requests are left out), errors by code, the latest failures.',
  z.strictObject({
    window_minutes: z.number().int(),
    minutes: z.array(
      z.strictObject({
        at: iso.describe('The minute (UTC) the requests were queued in'),
        requests: z.number().int(),
        requests_per_second: z.number(),
        errors: z.number().int().describe('Requests that ended failed or timed_out'),
        ttft_p50_ms: msOrNull,
        ttft_p95_ms: msOrNull,
        duration_p50_ms: msOrNull,
        duration_p95_ms: msOrNull,
      }),
    ),
    errors_by_code: z.array(z.strictObject({ code: z.string(), count: z.number().int() })),
    recent_failures: z.array(
      z.strictObject({
        task_address: z.string(),
        org: z.string(),
        model: z.string(),
        status: z.enum(['failed', 'timed_out']),
        error_code: z.string().nullable(),
        queued_at: iso,
        finished_at: iso.nullable(),
      }),
    ),
  }),
);

export const dashboardSession = named(
  'DashboardSession',
  'Whether the request carries a live dashboard session cookie.',
  z.strictObject({ signed_in: z.boolean() }),
);
