import { createHmac } from 'node:crypto';
import { hostname, userInfo } from 'node:os';
import type { AuditVia } from '../prisma/generated/enums';
import type { AuditKind } from './audit-kinds';
import type { Sql } from './sql';

export { AUDIT_KINDS } from './audit-kinds';
export type { AuditKind } from './audit-kinds';

/**
 * The audit log of admin changes (docs/architecture.md, "Audit log"): every write of the admin services
 * records one entry, in the transaction of the change, saying who made it (never with a secret), through
 * what, what it was, and the object before and after it.
 */

/** Who made an admin change, and through which front end. */
export interface AuditActor {
  via: AuditVia;
  /** `admin-token:<fingerprint>`, `dashboard:<session fingerprint>` or `cli:<user>@<host>`. */
  actor: string;
}

/** What one entry records: the kind of change, its object, and the object's values before and after it. */
export interface AuditChange {
  kind: AuditKind;
  target: string;
  /** Null for a creation. */
  before: object | null;
  /** Null for a removal. */
  after: object | null;
}

/** A JSON value, as an entry's `before` and `after` hold them. */
export type AuditJson = null | boolean | number | string | AuditJson[] | { [field: string]: AuditJson };

/**
 * The names of fields that hold a secret or a digest of one (an API key's `hash`, a device's `token_hash`,
 * a new key's `key`, a new device's `token`): left out of every entry, at any depth. Display prefixes
 * (`prefix`, `token_prefix`) are not secrets: they tell keys apart, as the lists show them.
 */
const SECRET_FIELD = /^(key|token|secret|password|hash)$|_(key|token|hash|secret|password)$/i;
/** Anything shaped like an API key or a device token, wherever it appears in a text: a second line of defence. */
const SECRET_TEXT = /\bsyd?_[0-9A-Za-z]{32,}/g;

/** A value as an entry stores it: JSON, without secrets (fields named for them, texts shaped like them). */
export function auditValue(value: unknown): AuditJson {
  if (value === null || value === undefined) {
    return null;
  }
  if (value instanceof Date) {
    return Number.isNaN(value.getTime()) ? null : value.toISOString();
  }
  if (typeof value === 'string') {
    return value.replace(SECRET_TEXT, '[redacted]');
  }
  if (typeof value === 'number') {
    return Number.isFinite(value) ? value : null;
  }
  if (typeof value === 'boolean') {
    return value;
  }
  if (typeof value === 'bigint') {
    // A BIGINT column (a budget), which pg reads as a string of digits and a Prisma client as a bigint:
    // a string either way, exact whatever its size.
    return value.toString();
  }
  if (Array.isArray(value)) {
    return value.map(auditValue);
  }
  if (typeof value === 'object') {
    const out: { [field: string]: AuditJson } = {};
    for (const [field, v] of Object.entries(value as Record<string, unknown>)) {
      if (!SECRET_FIELD.test(field) && v !== undefined) {
        out[field] = auditValue(v);
      }
    }
    return out;
  }
  // Symbols and functions: nothing a row holds.
  return null;
}

/**
 * Records one admin change, on the transaction that makes it (so that a change is never without its
 * entry, nor an entry without its change). A change without an actor is a programming error: the
 * services are given theirs by the front end (`as(actor)`), and writing nothing is better than writing
 * a change nobody can be named for.
 */
export async function recordAudit(sql: Sql, actor: AuditActor | null, change: AuditChange): Promise<void> {
  if (!actor) {
    throw new Error(`admin change '${change.kind}' without an actor: give the admin service one with as(actor)`);
  }
  await sql.query(
    `INSERT INTO audit_log (actor, via, kind, target, before, after)
     VALUES ($1, $2::audit_via, $3, $4, $5::jsonb, $6::jsonb)`,
    [
      actor.actor,
      actor.via,
      change.kind,
      change.target,
      change.before === null ? null : JSON.stringify(auditValue(change.before)),
      change.after === null ? null : JSON.stringify(auditValue(change.after)),
    ],
  );
}

/** How many hex digits of a fingerprint an actor shows: 48 bits tell tokens and sessions apart, and reveal nothing. */
const FINGERPRINT_HEX = 12;
/** The HMAC's message: a label of the audit log's own, so that no other digest of the same secret matches it. */
const FINGERPRINT_LABEL = 'switchyard audit actor v1';

/** A short fingerprint of a secret: an HMAC keyed by it, from which the secret cannot be read back. */
function fingerprint(secret: string): string {
  return createHmac('sha256', secret).update(FINGERPRINT_LABEL).digest('hex').slice(0, FINGERPRINT_HEX);
}

/** A caller of the admin API with the admin token: `admin-token:<fingerprint>` (another token, another name). */
export function adminTokenActor(token: string): AuditActor {
  return { via: 'api', actor: `admin-token:${fingerprint(token)}` };
}

/**
 * A dashboard session: `dashboard:<fingerprint of the session's id>`. The same for every change of one
 * sign-in, another for the next; the id in the browser's cookie has the same fingerprint.
 */
export function dashboardActor(sessionId: string): AuditActor {
  return { via: 'dashboard', actor: `dashboard:${fingerprint(sessionId)}` };
}

/**
 * This process's operating-system user and host, `cli:<user>@<host>`: the CLI's actor, and that of any
 * program that makes changes through the admin services directly (fixtures, the demo).
 */
export function localActor(): AuditActor {
  let user: string;
  try {
    user = userInfo().username;
  } catch {
    // A uid without a passwd entry (a container's arbitrary user).
    user = `uid-${process.getuid?.() ?? 'unknown'}`;
  }
  return { via: 'cli', actor: `cli:${user}@${hostname()}` };
}
