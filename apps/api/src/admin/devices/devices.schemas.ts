import { z } from 'zod';
import { listOf, named } from '../../openapi/components';

/*
 * The bodies the devices routes validate (strict: an unknown key is 400) and the answers they give.
 * Values are checked further by the admin services, so that the CLI and the API refuse the same things.
 */

const allowedModelsInput = z
  .array(z.string())
  .nullable()
  .describe('The only catalog models the device may serve (at least one); null: any model it may otherwise serve');

export const createDeviceBody = z.strictObject({
  name: z.string().describe('1-64 characters'),
  org: z.string().optional().describe('The organization of a direct device; none registers a network device'),
  models: allowedModelsInput.optional(),
});
export const updateDeviceBody = z.strictObject({
  models: allowedModelsInput.optional(),
  trust: z
    .string()
    .optional()
    .describe('A network device: `quarantined` (it is given no network tasks) or `trusted` (it is again)'),
  reason: z.string().optional().describe('Why the trust changed (up to 200 characters), kept with it and logged'),
});

const iso = z.iso.datetime({ offset: true });
const uuid = z.uuid();
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
    trust: z
      .strictObject({
        state: z
          .enum(['probation', 'trusted', 'quarantined'])
          .describe('Only a trusted network device is given network tasks; probation ends with its first canary'),
        reason: z.string().nullable(),
        changed_at: iso.nullable(),
        canaries_passed: z.number().int().describe('Canary prompts it answered as registered'),
        canaries_failed: z.number().int().describe('Canary prompts it answered otherwise'),
        last_canary_at: iso.nullable().describe('When it last answered a canary'),
      })
      .describe(
        'Whether network tasks may go to it (a direct device is always trusted), why, since when, and its canaries',
      ),
    created_at: iso,
    last_seen_at: iso.nullable().describe('When it last connected to a dispatcher'),
    revoked_at: iso.nullable(),
    online: z.boolean().describe('Connected to a dispatcher now'),
    connected_at: iso.nullable().describe('When its current connection began; null when offline'),
    last_heartbeat_at: iso.nullable().describe('Its last sign of life, renewed every 5 s while connected'),
    dispatcher: z.string().nullable().describe('The dispatcher instance it is connected to'),
    models: z.array(z.string()).describe('The announced models it was accepted for (serves); empty when offline'),
    digests: z
      .record(z.string(), z.string())
      .describe('The digest it announced for each model it serves, by model (its runtime’s word; none: left out)'),
    features: z.array(z.string()).describe('The features its backend supports, as announced'),
    available: z.boolean().nullable().describe('False while its runtime is unreachable; null when offline'),
    task: z.string().nullable().describe('The task address it is serving, or null'),
  }),
);
export const deviceList = named('DeviceList', 'Every device, oldest first.', listOf(device));
export const deviceRevoked = named(
  'DeviceRevoked',
  'A revoked device.',
  z.strictObject({ id: uuid, name: z.string(), revoked_at: iso }),
);
