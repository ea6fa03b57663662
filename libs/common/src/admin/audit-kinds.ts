/*
 * The audit log's vocabulary (audit.ts): the kinds of its entries, their families, the size of its pages.
 * No imports: the api's OpenAPI schemas (which the dashboard's compiler reads too), the dashboard's bundle
 * and the CLI's command line take them from here without loading anything else.
 */

/**
 * Every kind of admin change, one per operation of the admin services, with what its entry holds. The
 * table of docs/api.md ("Audit log") is generated from it (`npm run docs:generate`).
 */
export const AUDIT_KINDS = {
  'org.create': 'An organization was created. Target: its name; after: the organization.',
  'org.update':
    'An organization’s limits, switches, compat, weight or budget were set (`PATCH /admin/orgs/{org}`, `org limits|network|resume|compat|weight`). Target: its name; before and after: the organization.',
  'key.create': 'An API key was created. Target: its id; after: the key (its prefix, never the key) and its `org`.',
  'key.rotate':
    'An API key was rotated. Target: the old key’s id; before: the old key; after: the old key (with its new `expires_at`) and `replacement`, the new key.',
  'key.revoke': 'An API key was revoked. Target: its id; before and after: the key.',
  'key.budget': 'An API key’s monthly token budget was set or removed. Target: its id; before and after: the key.',
  'model.add': 'A model was added to the catalog. Target: its id; after: the model.',
  'model.update':
    'A catalog model’s kind, `max_output_tokens`, `owned_by`, network switch or allowed digests were changed. Target: its id; before and after: the model.',
  'model.enable':
    'A model was enabled for an organization. Target: `<org>/<model>`; before and after: `{org, model, enabled}`.',
  'model.disable':
    'A model was disabled for an organization. Target: `<org>/<model>`; before and after: `{org, model, enabled}`.',
  'canary.add': 'A canary prompt was registered. Target: its id; after: the canary.',
  'canary.remove': 'A canary prompt was removed. Target: its id; before: the canary.',
  'device.create': 'A device was registered. Target: its id; after: the device (its token prefix, never the token).',
  'device.models':
    'A device was restricted to listed models, or the restriction lifted. Target: its id; before and after: the device.',
  'device.quarantine': 'A network device was quarantined. Target: its id; before and after: the device.',
  'device.trust': 'A network device was trusted (again). Target: its id; before and after: the device.',
  'device.revoke': 'A device was revoked. Target: its id; before and after: the device.',
} as const satisfies Record<string, string>;

export type AuditKind = keyof typeof AUDIT_KINDS;

/** The kinds, in the table's order. */
export const AUDIT_KIND_NAMES = Object.keys(AUDIT_KINDS) as AuditKind[];
/** The families of kinds (`org`, `key`, …): a family stands for all its kinds. */
export const AUDIT_FAMILIES = [...new Set(AUDIT_KIND_NAMES.map((k) => k.slice(0, k.indexOf('.'))))];

/** Entries per page when the caller does not say. */
export const AUDIT_PAGE_DEFAULT = 100;
/** The most entries a page holds: a page is one indexed query, and a screen or a terminal shows fewer. */
export const AUDIT_PAGE_MAX = 500;
